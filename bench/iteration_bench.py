"""What one training iteration costs at the demo's scale: this checkout against a baseline
revision, side by side, in one run on this machine. Prints figures; asserts nothing.

    python bench/iteration_bench.py [--baseline REV] [--iterations 2] [--config configs/demo.yaml]

1. This checkout runs `mars train` on the preset (its format warm-up included, evaluations
   off) for `--iterations` iterations.
2. The baseline revision (default: the last commit before the iteration speed-ups) runs from
   a temporary git worktree, same preset and seeds, starting from the weights step 1 warmed
   up (its own warm-up off), so both sides begin from the same policy.
3. Per side and iteration: seconds per stage (rollouts, the post-processing and batching
   stages, the update) from the `time/<stage>` figures the stages record; tokens per second
   per stage (rollouts: generated and prompt tokens; update: the batch's prompt + completion
   tokens); the speed-up of the whole iteration.
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

from mars_core.run import layout, offline

REPO = Path(__file__).resolve().parents[1]
BASELINE = "41e3491"  # main before the shared prefixes, the bf16 rule and the iteration work
ROLLOUT, UPDATE = layout.GENERATE_ROLLOUTS, layout.TRAIN_STEP
BETWEEN = tuple(s for s in layout.ITERATION_STAGES if s not in (ROLLOUT, UPDATE, layout.EVALUATE))
ENV = offline.ENV


def train(code: Path, runs: Path, config: str, sets: list[str]) -> Path:
    """`mars train` with the code in `code` (its packages first on the path); the run folder."""
    cmd = [sys.executable, "-m", "cli.main", "train", "--config", config, "--runs-dir", str(runs),
           "--run-name", "bench"] + [a for s in sets for a in ("--set", s)]
    env = {**os.environ, **ENV, "PYTHONPATH": str(code), "PREFECT_HOME": str(runs / "prefect")}
    env.pop("PREFECT_API_URL", None)
    log = runs / "train.log"
    runs.mkdir(parents=True, exist_ok=True)
    with log.open("w") as f:
        rc = subprocess.call(cmd, cwd=code, env=env, stdout=f, stderr=subprocess.STDOUT)
    if rc:
        raise SystemExit(f"mars train failed in {code} (exit {rc}); log: {log}")
    return runs / "bench"


def figures(run: Path, iterations: int) -> list[dict]:
    """Per iteration: stage seconds and token counts read from the run's stage folders."""
    out = []
    for k in range(iterations):
        it = layout.iter_dir(run, k)
        secs = {}
        for m in it.glob(f"*/{layout.METRICS_FILE}"):
            for key, v in json.loads(m.read_text()).items():
                if key.startswith("time/"):
                    secs[key[5:]] = v
        turns = pl.read_parquet(it / ROLLOUT / layout.TURNS_FILE)
        model_turns = turns.filter(pl.col("completion_ids").list.len() > 0)
        samples = pl.read_parquet(it / layout.COMPUTE_ADVANTAGES / layout.SAMPLES_FILE)
        out.append({
            "rollout_s": secs[ROLLOUT], "update_s": secs[UPDATE],
            "between_s": sum(secs.get(s, 0.0) for s in BETWEEN),
            "generated": int(model_turns["completion_ids"].list.len().sum()),
            "prompt": int(model_turns["prompt_ids"].list.len().sum()),
            "samples": samples.height,
            "trained": int(samples["prompt_ids"].list.len().sum()
                           + samples["completion_ids"].list.len().sum())})
    return out


def report(name: str, rows: list[dict]) -> float:
    print(f"{name}:")
    for k, r in enumerate(rows):
        total = r["rollout_s"] + r["between_s"] + r["update_s"]
        print(f"  iter {k}: {total:6.1f} s = rollouts {r['rollout_s']:5.1f} s "
              f"({r['generated'] / r['rollout_s']:5.1f} generated tok/s, "
              f"{r['prompt'] / r['rollout_s']:6.0f} prompt tok/s) + post-processing and "
              f"batching {r['between_s']:4.1f} s + update {r['update_s']:5.1f} s "
              f"({r['samples']} samples, {r['trained'] / r['update_s']:5.0f} tok/s)")
    mean = sum(r["rollout_s"] + r["between_s"] + r["update_s"] for r in rows) / len(rows)
    print(f"  mean iteration {mean:.1f} s")
    return mean


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", default=BASELINE, help="git revision to compare with")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--config", default="configs/demo.yaml")
    p.add_argument("--keep", action="store_true", help="keep the runs (printed) afterwards")
    args = p.parse_args()
    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="mars-iteration-bench-"))
    common = ["evaluation.every=0", f"run.iterations={args.iterations}"]
    try:
        print(f"{args.config}, {args.iterations} iterations; this checkout first, then "
              f"{args.baseline} from the same warmed-up weights", flush=True)
        now = train(REPO, tmp / "now", args.config, common)
        warm = layout.start_model_dir(now)
        worktree = tmp / "baseline"
        rc = subprocess.call(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q",
                              str(worktree), args.baseline])
        if rc:
            raise SystemExit(f"git has no revision {args.baseline} here (a shallow clone?)")
        try:
            base = train(worktree, tmp / "base", args.config, common + [
                f"model.path={warm}", "warmup.steps=0", "warmup.probe_games=0"])
            before = report(f"baseline {args.baseline}", figures(base, args.iterations))
        finally:
            subprocess.call(["git", "-C", str(REPO), "worktree", "remove", "--force",
                             str(worktree)])
        after = report("this checkout", figures(now, args.iterations))
        print(f"iteration speed-up: {before / after:.2f}x ({before:.1f} s -> {after:.1f} s)")
    finally:
        if args.keep:
            print(f"runs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
