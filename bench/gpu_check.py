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

The code: this file (the command line, the steps run in order, each timed and
stopped at the deadline); gpu_check_carry.py (the packages, the carry), gpu_check_update.py
(the PPO update: steps 3 and 7), gpu_check_steps.py (the other steps), gpu_check_report.py
(gpu_check.md): plain modules beside it, imported from this folder.
"""
from __future__ import annotations

import argparse
import atexit
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
# its sibling modules, found whether it runs as a script or is loaded from its file (tests)
if str(REPO / "bench") not in sys.path:
    sys.path.append(str(REPO / "bench"))

# (LIMIT_BYTES, tree_bytes: read from here by tests/unit/test_gpu_check.py)
from gpu_check_carry import (DEFAULT_CARRY, HIDDEN, LIMIT_BYTES, STALL, Missing,  # noqa: E402,F401
                             build_carry, carry_size, mib, setup_packages, tree_bytes)
from gpu_check_report import figures, markdown  # noqa: E402
from gpu_check_steps import STEP_FUNCS, STEPS  # noqa: E402
from gpu_check_update import Ctx, _free  # noqa: E402


class StepTimeout(BaseException):
    """A step still running at --deadline (raised from SIGALRM: BaseException, so no step's
    own `except Exception` swallows it)."""


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
