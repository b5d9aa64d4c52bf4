"""The two trainer backends side by side on the smoke preset (the embedded SmolLM2-135M, CPU):
`trainer.backend=torch` and then `trainer.backend=deepspeed` (ZeRO-2), same seed, same
config otherwise. Prints per iteration train/loss, train/pg_loss, train/grad_norm and the
train_step seconds of each (the "same loss curve shape" evidence), and peak memory: the
pipeline process (rollouts and, for torch, the update) and the DeepSpeed worker (rank 0).
Prints figures; asserts nothing.

    python bench/deepspeed_bench.py [--iterations 3] [--runs-dir DIR] [--set key=value ...]
    python bench/deepspeed_bench.py --set 'model.bf16="off"'   # fp32 on both sides

The rollouts of iteration 0 are identical; later ones are sampled from the two backends'
own policies, so the curves agree in shape, not digit for digit (with model.bf16 on, the
torch path autocasts fp32 weights while DeepSpeed keeps bf16 weights and fp32 masters).
Each DeepSpeed iteration pays the worker start (imports, process group) and its checkpoint.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import mars_core.run.threads  # noqa: E402,F401  (first: the thread settings, before torch loads)
from mars_core.run.layout import METRICS_FILE, TRAIN_STEP, stage_dir  # noqa: E402

KEYS = ("train/loss", "train/pg_loss", "train/grad_norm", f"time/{TRAIN_STEP}")


def run(backend: str, runs_dir: Path, iterations: int, extra: list[str]) -> tuple[float, float]:
    """`mars train` on the smoke preset with this backend; returns (wall seconds, peak RSS MiB
    of the pipeline process and its descendants: the largest one of them, from wait4)."""
    sets = [f"trainer.backend={backend}", f"run.iterations={iterations}", "evaluation.every=0",
            "checkpoint.keep_last=1", *extra]  # one checkpoint on disk: ~2-3 GB for 135M
    cmd = [sys.executable, "-m", "cli.main", "train", "--config", str(REPO / "configs/smoke.yaml"),
           "--runs-dir", str(runs_dir), "--run-name", backend,
           *[a for s in sets for a in ("--set", s)]]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PREFECT_API_URL", None)  # a temporary server per run, as `make smoke` does
    start = time.perf_counter()
    log = runs_dir / f"{backend}.log"
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this run's own rusage
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise SystemExit(f"{backend} run failed (exit {rc}); log: {log}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def metrics(run_dir: Path, iterations: int) -> list[dict]:
    """train_step's metrics of each iteration ({} where it has none)."""
    paths = [stage_dir(run_dir, k, TRAIN_STEP) / METRICS_FILE for k in range(iterations)]
    return [json.loads(p.read_text()) if p.is_file() else {} for p in paths]


def table(torch_m: list[dict], ds_m: list[dict]) -> None:
    head = " ".join(f"{k.split('/')[1] + ' ' + b:>16s}" for k in KEYS for b in ("torch", "ds"))
    print(f"{'iter':>4s} {head}")
    for k, (t, d) in enumerate(zip(torch_m, ds_m)):
        cells = " ".join(f"{t.get(key, float('nan')):16.5f} {d.get(key, float('nan')):16.5f}"
                         for key in KEYS)
        print(f"{k:4d} {cells}")
    rss = [d["train/peak_rss_mb"] for d in ds_m if "train/peak_rss_mb" in d]
    if rss:
        print(f"DeepSpeed worker (rank 0) peak RSS: {max(rss):.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--runs-dir", default=None,
                    help="keep the runs there (default: a temporary folder, removed run by run)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="more config overrides for both runs, e.g. 'model.bf16=\"off\"' "
                         "(quoted: YAML reads a bare off as false)")
    args = ap.parse_args()
    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    runs_dir = Path(args.runs_dir or tempfile.mkdtemp(prefix="mars-ds-bench-"))
    runs_dir.mkdir(parents=True, exist_ok=True)
    print(f"smoke preset, {args.iterations} iterations, runs in {runs_dir}")
    found = {}
    for backend in ("torch", "deepspeed"):
        wall, rss = run(backend, runs_dir, args.iterations, args.overrides)
        print(f"  {backend:9s} run: {wall:6.1f} s wall, peak RSS of its largest process {rss:.0f} MiB")
        found[backend] = metrics(runs_dir / backend, args.iterations)
        if not args.runs_dir:  # checkpoints are GBs: free the disk before the next run
            shutil.rmtree(runs_dir / backend)
    table(found["torch"], found["deepspeed"])
    if not args.runs_dir:
        shutil.rmtree(runs_dir)


if __name__ == "__main__":
    main()
