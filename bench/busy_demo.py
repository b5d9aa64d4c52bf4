"""The demo's iteration alone and beside a second CPU-bound torch job (issue 46's measure).

`mars train` on `configs/demo.yaml` cut to one iteration (no evaluations, two warm-up steps), in a
fresh runs folder each time, under each thread setting asked for:

- `PASSIVE`: what `mars` sets (mars_core/run/threads.py);
- `default`: libgomp's own behaviour (threads spin 300,000 times before they sleep), by giving
  `OMP_WAIT_POLICY` an empty value, which `mars` keeps and libgomp ignores (slow beside a
  job: the issue measured 20x and more; `--default` adds it);

alone, then beside a process looping 1024 x 1024 fp32 matmuls with torch's defaults (every
core, spinning threads: a notebook, another run). It prints, per case, the seconds of the
warm-up (the `init` stages) and of the iteration's stages (rollouts, post-processing, batching,
update: the stages' own `time/` metrics), the whole command's wall seconds, and the ratio
beside / alone. Take it on an otherwise idle machine (`uptime` is printed first):

    python bench/busy_demo.py [--default] [--timeout 3600]

Prints figures; asserts nothing.
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contention_bench import HOG, OTHER, _env, _start  # bench/ is this script's sys.path[0]

from mars_core.run.layout import INIT, METRICS_FILE, iter_dir

REPO = Path(__file__).resolve().parents[1]
SETS = ("run.iterations=1", "evaluation.every=0", "evaluation.at_start=false", "warmup.steps=2")
CASES = {"PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"}, "default": {"OMP_WAIT_POLICY": ""}}


def stage_seconds(folder: Path) -> float:
    """The `time/` metrics of every stage under `folder` (a run's init or iteration)."""
    return sum(v for m in folder.glob(f"*/{METRICS_FILE}")
               for k, v in json.loads(m.read_text()).items() if k.startswith("time/"))


def one_run(case: dict, timeout: float) -> dict:
    """`mars train` on the cut demo in a fresh runs folder: its seconds."""
    with tempfile.TemporaryDirectory(prefix="busy-demo-") as tmp:
        env = _env({**case, "PREFECT_HOME": str(Path(tmp) / "prefect")})
        argv = [sys.executable, "-m", "cli.main", "train", "--config",
                str(REPO / "configs/demo.yaml"), "--runs-dir", str(Path(tmp) / "runs"),
                "--run-name", "busy"] + [a for s in SETS for a in ("--set", s)]
        started = time.perf_counter()
        try:
            done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"  not finished in --timeout {timeout:.0f} s", flush=True)
            return {"warm-up s": float("nan"), "iteration s": float("nan"), "wall s": timeout}
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"mars train failed ({done.returncode}): {done.stderr[-2000:]}")
        run = Path(tmp) / "runs" / "busy"
        return {"warm-up s": stage_seconds(run / INIT), "iteration s": stage_seconds(
            iter_dir(run, 0)), "wall s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--default", action="store_true", help="also libgomp's default wait policy")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per `mars train`")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    cases = {k: v for k, v in CASES.items() if k == "PASSIVE" or args.default}
    rows = {}
    for name, case in cases.items():
        for load in ("alone", "beside big"):
            hog = None if load == "alone" else _start(
                ["-c", HOG.format(operands=OTHER["big"])], _env({}))
            try:
                rows[name, load] = one_run(case, args.timeout)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
            print(f"{name:8} {load:10} " + "  ".join(f"{k} {v:7.1f}" for k, v in
                                                   rows[name, load].items()), flush=True)
    from mars_core.models.precision import cpu_description

    print(f"\n{cpu_description()}\n")
    print("| setting | warm-up s alone | beside | iteration s alone | beside | ratio | wall s "
          "alone | beside |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in cases:
        a, b = rows[name, "alone"], rows[name, "beside big"]
        print(f"| {name} | {a['warm-up s']:.1f} | {b['warm-up s']:.1f} | {a['iteration s']:.1f} "
              f"| {b['iteration s']:.1f} | {b['iteration s'] / a['iteration s']:.2f}x "
              f"| {a['wall s']:.0f} | {b['wall s']:.0f} |")


if __name__ == "__main__":
    main()
