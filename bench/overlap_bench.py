"""Rollouts overlapping the update (`rollout.overlap`) against the synchronous flow, on a local
Ray cluster of two nodes, one CPU each: iterations per hour of both, side by side in one run.
Prints figures; asserts nothing.

    python bench/overlap_bench.py [--config configs/lab/tic_tac_toe_ppo.yaml]
                                  [--iterations 4] [--model PATH] [--set KEY=VALUE ...]

The two nodes are this machine's two CPUs, pinned (`taskset`) as if they were two machines:
the head node and the flow, whose update runs in its own process with one torch thread, on
CPU 0; a worker node offering Ray one CPU on CPU 1, where every rollout shard runs
(`cluster.shards=1`, `cpus_per_shard=1`). Both runs train the preset from the same start
(`--model`: a warmed-up policy folder, e.g. a run's `init/prepare_policy/model`, skips the
format warm-up; without it each run warms up first), without evaluations, through a Prefect
server started here. The synchronous run plays iteration k's games, then trains on them; the
overlapped one plays iteration k+1's games on the worker node while iteration k trains on the
head (one update behind, corrected by the importance weight).

Per run: the wall time of each iteration (from the previous checkpoint to this one; iteration
0 from the start policy), its rollout and update seconds, the behaviour gap the importance
weight corrected, and iterations per hour, both over all iterations and over iterations
1..N-1 (iteration 0 of an overlapped run cannot overlap: nothing was played ahead of it).
Over 2 cores the ceiling is (rollout + update) / max(rollout, update).
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
from mars_core.run import offline  # noqa: E402

offline.apply()
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="mars-bench-prefect-"))

from mars_core.run.commit import MARKER  # noqa: E402
from mars_core.run.layout import (GENERATE_ROLLOUTS, INIT, METRICS_FILE,  # noqa: E402
                                  PREPARE_POLICY, SAVE_CHECKPOINT, TRAIN_STEP, stage_dir)
from tests.raycluster import two_node_cluster  # noqa: E402


def _train(runs: Path, name: str, args, address: str, api: str, overlap: bool) -> float:
    sets = [f"run.iterations={args.iterations}", "evaluation.every=0",
            "evaluation.at_start=false", "cluster.shards=1", f"cluster.ray.address={address}",
            "cluster.ray.cpus_per_shard=1", f"rollout.overlap={str(overlap).lower()}",
            *args.set]
    if args.model:
        sets += [f"model.path={args.model}", "warmup.steps=0"]
    cmd = ["taskset", "-c", "0", sys.executable, "-m", "cli.main", "train", "--config",
           args.config, "--runs-dir", str(runs), "--run-name", name,
           *[x for s in sets for x in ("--set", s)]]
    env = {**os.environ, "PREFECT_API_URL": api, "OMP_NUM_THREADS": "1",
           "MLFLOW_TRACKING_URI": f"sqlite:///{runs}/mlflow.db", "PYTHONPATH": str(REPO)}
    start = time.time()
    with open(runs / f"{name}.log", "w") as log:
        done = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{name}: mars train exited {done.returncode} (log and runs kept: "
                         f"{runs}/{name}.log)")
    return time.time() - start


def _figures(run: Path, iterations: int) -> dict:
    def done_at(folder: Path) -> float:
        return (folder / MARKER).stat().st_mtime

    def metric(k: int, stage: str, key: str) -> float:
        m = json.loads((stage_dir(run, k, stage) / METRICS_FILE).read_text())
        return m.get(key, float("nan"))

    marks = [done_at(stage_dir(run, INIT, PREPARE_POLICY))]
    marks += [done_at(stage_dir(run, k, SAVE_CHECKPOINT)) for k in range(iterations)]
    walls = [b - a for a, b in zip(marks, marks[1:])]
    rows = [{"iteration": k, "wall_s": walls[k],
             "rollout_s": metric(k, GENERATE_ROLLOUTS, f"time/{GENERATE_ROLLOUTS}"),
             "update_s": metric(k, TRAIN_STEP, f"time/{TRAIN_STEP}"),
             "gap": metric(k, TRAIN_STEP, "train/behaviour_gap_abs")} for k in range(iterations)]
    steady = walls[1:]
    return {"rows": rows, "per_hour": 3600 * iterations / sum(walls),
            "per_hour_steady": 3600 * len(steady) / sum(steady) if steady else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/lab/tic_tac_toe_ppo.yaml")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--model", help="a warmed-up policy folder (skips the format warm-up)")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for both runs")
    ap.add_argument("--keep", action="store_true", help="keep the two runs (GBs) afterwards")
    args = ap.parse_args()
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("the bench pins two nodes to two CPUs: this machine has one")
    from prefect.testing.utilities import prefect_test_harness

    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    print(f"preset: {args.config}, {args.iterations} iterations, start: "
          f"{args.model or 'the preset (with its warm-up)'}", flush=True)
    runs = Path(tempfile.mkdtemp(prefix="mars-overlap-bench-"))
    from prefect.settings import PREFECT_API_URL

    results = {}
    with prefect_test_harness(server_startup_timeout=120):
        api = PREFECT_API_URL.value()
        with two_node_cluster(cpus=(0, 1), pins=("0", "1")) as address:
            for name, overlap in (("sync", False), ("overlap", True)):
                wall = _train(runs, name, args, address, api, overlap)
                results[name] = _figures(runs / name, args.iterations)
                print(f"{name}: {wall:.0f} s for the command", flush=True)
    print(f"\n{'run':>8} {'iter':>4} {'wall s':>7} {'rollout s':>9} {'update s':>8} "
          f"{'gap':>7}")
    for name, r in results.items():
        for row in r["rows"]:
            print(f"{name:>8} {row['iteration']:>4} {row['wall_s']:>7.1f} "
                  f"{row['rollout_s']:>9.1f} {row['update_s']:>8.1f} {row['gap']:>7.4f}")
    s, o = results["sync"], results["overlap"]
    print(f"\niterations per hour: sync {s['per_hour']:.1f}, overlap {o['per_hour']:.1f} "
          f"({o['per_hour'] / s['per_hour']:.2f}x); iterations 1..{args.iterations - 1}: sync "
          f"{s['per_hour_steady']:.1f}, overlap {o['per_hour_steady']:.1f} "
          f"({o['per_hour_steady'] / s['per_hour_steady']:.2f}x)")
    rollout = sum(r["rollout_s"] for r in s["rows"][1:])
    update = sum(r["update_s"] for r in s["rows"][1:])
    print(f"ceiling from the synchronous run's stages (iterations 1..): "
          f"{(rollout + update) / max(rollout, update):.2f}x")
    if args.keep:
        print(f"runs kept in {runs}")
    else:
        shutil.rmtree(runs, ignore_errors=True)


if __name__ == "__main__":
    main()
