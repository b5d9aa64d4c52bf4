"""bf16 autocast chosen by measurement, per machine and per phase.

`model.bf16: auto` used to mean "a GPU, or a CPU with AMX": on one 2-core CPU bf16 autocast ran
slower than fp32 (163 vs 277 GFLOP/s), on another (AMD EPYC with AVX512-BF16, no AMX) 4.3x
faster. So `auto` now times the two on this CPU, once, and takes the faster one for each phase
separately:

- `update`: a model-shaped MLP block (SmolLM2-135M: 576 -> 1536 -> 576) forward and backward
  on 256 tokens, as the trainer and the warm-up run it;
- `play`: the same block forward only, on 32 rows (a decode step of the in-process engine's
  batch), as rollouts and evaluations run it.

bf16 is taken when it is at least `MARGIN` times faster (noise never flips a machine back and
forth). The result is cached in `$MARS_CACHE_DIR/precision.json` (default
`~/.cache/mars`), keyed by the CPU's model name and bf16-relevant flags, the torch version and
the thread count, so each process after the first reads it; an unreadable cache is measured
again and rewritten. A CUDA device with bf16 support always takes bf16. `on`/`off` force it.

`MARS_BF16_AUTO=on|off` answers `auto` without measuring: the test suite sets `off` so its
token-by-token comparisons hold on every CPU (bf16 play differs with its batch).
"""
from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

PHASES = ("update", "play")
MARGIN = 1.15
FLAGS = ("avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "avx2")
HIDDEN, INTERMEDIATE = 576, 1536
SHAPES = {"update": 256, "play": 32}


def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo`), as every performance figure names it."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cpu_flags() -> list[str]:
    """The bf16-relevant instruction-set flags this CPU reports."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return []
    have = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            break
    return [f for f in FLAGS if f in have]


def cpu_description() -> str:
    """One line for bench output and docs: model, flags, threads, torch."""
    return (f"{cpu_model()} [{' '.join(cpu_flags()) or 'no AVX flags'}], "
            f"{torch.get_num_threads()} threads, torch {torch.__version__}")


def machine_key() -> str:
    return "|".join([cpu_model(), ",".join(cpu_flags()), torch.__version__,
                     str(torch.get_num_threads())])


@dataclass(frozen=True)
class Calibration:
    """Seconds per call of the phase's block in fp32 and under bf16 autocast, and the choice."""

    phase: str
    fp32_s: float
    bf16_s: float

    @property
    def speedup(self) -> float:
        return self.fp32_s / self.bf16_s if self.bf16_s > 0 else 0.0

    @property
    def bf16(self) -> bool:
        return self.speedup >= MARGIN


def _time_block(phase: str, bf16: bool, budget_s: float) -> float:
    """Best-of-repeats seconds per call of the MLP block (fp32 weights, as LoRA training keeps)."""
    g = torch.Generator().manual_seed(0)
    up = torch.nn.Linear(HIDDEN, INTERMEDIATE)
    down = torch.nn.Linear(INTERMEDIATE, HIDDEN)
    x = torch.randn(SHAPES[phase], HIDDEN, generator=g, requires_grad=phase == "update")

    def call():
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else torch.autocast(
            "cpu", enabled=False)
        with ctx:
            y = down(torch.nn.functional.silu(up(x)))
        if phase == "update":
            y.float().sum().backward()

    grad = torch.enable_grad() if phase == "update" else torch.inference_mode()
    with grad:
        call()  # warm-up: kernels chosen, buffers allocated
        best, spent = float("inf"), 0.0
        while spent < budget_s:
            t = time.perf_counter()
            for _ in range(4):
                call()
            dt = (time.perf_counter() - t) / 4
            best, spent = min(best, dt), spent + 4 * dt
    return best


def calibrate(phase: str, budget_s: float = 0.4) -> Calibration:
    """Time the phase's block in fp32 and in bf16 (about 2 x `budget_s`)."""
    if phase not in PHASES:
        raise ValueError(f"unknown precision phase {phase!r} (one of {', '.join(PHASES)})")
    return Calibration(phase, _time_block(phase, False, budget_s),
                       _time_block(phase, True, budget_s))


def cache_file() -> Path:
    root = os.environ.get("MARS_CACHE_DIR") or Path.home() / ".cache" / "mars"
    return Path(root) / "precision.json"


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(path: Path, data: dict) -> None:
    """Atomically (a unique temporary file renamed into place); a cache that cannot be written
    costs a measurement next time, never the run."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".precision.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass


_MEASURED: dict[tuple[str, str, str], Calibration] = {}  # this process's, when no cache holds it


def calibration(phase: str) -> Calibration:
    """This machine's calibration for the phase: from the cache, else measured and cached (and
    kept in this process too, so a cache that cannot be written costs one measurement, not one
    per call)."""
    path, key = cache_file(), machine_key()
    memo = (str(path), key, phase)
    if memo in _MEASURED:
        return _MEASURED[memo]
    data = _read_cache(path)
    entry = data.get(key, {}).get(phase) if isinstance(data.get(key), dict) else None
    if isinstance(entry, dict):
        try:
            return Calibration(phase, float(entry["fp32_s"]), float(entry["bf16_s"]))
        except (KeyError, TypeError, ValueError):
            pass
    cal = calibrate(phase)
    data = _read_cache(path)  # another process may have written meanwhile
    machine = data.get(key) if isinstance(data.get(key), dict) else {}
    machine[phase] = {k: v for k, v in asdict(cal).items() if k != "phase"}
    data[key] = machine
    _write_cache(path, data)
    _MEASURED[memo] = cal
    return cal


def bf16_for(setting: str, phase: str) -> bool:
    """`on`, `off`, or `auto`: a CUDA device with bf16, else whichever this CPU ran faster for
    the phase (`MARS_BF16_AUTO` answers `auto` without measuring)."""
    if setting == "on":
        return True
    if setting != "auto":
        return False
    forced = os.environ.get("MARS_BF16_AUTO", "").strip().lower()
    if forced in ("on", "off"):
        return forced == "on"
    if forced:
        raise ValueError(f"MARS_BF16_AUTO={forced!r}: expected on or off")
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return calibration(phase).bf16


def hold_linears_in_bf16(model, only=None) -> int:
    """The weights of `model`'s linear layers held in bf16, for a model that runs only under
    bf16 autocast: autocast casts them to bf16 at every forward anyway (the same values, so the
    same outputs to the bit), and holding them so drops their fp32 copies and the casts made
    again at every forward. A weight shared with an embedding (a tied LM head: the lookup is
    not autocast) stays as it is; `only(name)` picks the layers (default: all). A forward
    outside autocast then fails on the mixed dtypes, loudly. The tensors left as they were are
    copied into the process's own memory (`_off_the_file`). Returns how many were cast."""
    tied = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    n, cast = 0, set()
    for name, module in model.named_modules():
        if (isinstance(module, torch.nn.Linear) and id(module.weight) not in tied
                and (only is None or only(name))):
            module.weight.data = module.weight.data.to(torch.bfloat16)
            cast.add(id(module.weight))
            n += 1
    if n:
        _off_the_file(model, cast)
    return n


def _off_the_file(model, skip: set[int]) -> None:
    """Every parameter and buffer of `model` not in `skip` (ids) copied into memory of its own.
    A model loads zero-copy from its safetensors file (its tensors are views of the file's
    mapping), and one tensor left on the mapping (the tied embedding) keeps it open: the fp32
    weights just cast stayed resident as file pages, 0.40 GB of the embedded model's (the
    update's replay, `RssFile` 570 -> 165 MB, the process 0.29 GB less)."""
    seen: set[int] = set(skip)
    for module in model.modules():
        for tensors in (module._parameters, module._buffers):
            for key, t in tensors.items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                if isinstance(t, torch.nn.Parameter):
                    t.data = t.data.clone()
                else:
                    tensors[key] = t.clone()
