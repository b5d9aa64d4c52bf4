"""The update's cost, update by update: where does its variance come from?

Replays one iteration's update (`train_step`: the same policy, batch, optimizer state and
seed; `tasks.train._train_torch`) of an existing run several times, into scratch folders (the
run is not changed), and prints per update the wall time, the process's peak RSS, the page
faults (minor and major) and the context switches (voluntary: waiting; involuntary: the CPU
taken away) it cost. The updates of one process follow each other as a flow's iterations do
(the allocator's state carries over); `--fresh` runs each in a process of its own instead.
`--env KEY=VALUE` (repeatable) sets environment variables in the replaying process, e.g. to
compare glibc's allocator settings:

    python bench/update_bench.py --run runs/kuhn_ppo --iteration 3 --repeat 4
    python bench/update_bench.py --run runs/kuhn_ppo --iteration 3 --repeat 4 \\
        --env MALLOC_MMAP_THRESHOLD_=33554432 --env MALLOC_TRIM_THRESHOLD_=4294967296

(glibc ignores an mmap threshold above 32 MiB.) `--set KEY=VALUE` (repeatable) changes the
run's config for the replay, e.g. the update's memory bound:

    python bench/update_bench.py --run runs/nim_selfplay --iteration 4 --repeat 1 \\
        --set optim.micro_batch_tokens=2048

The machine must be otherwise idle: two
processes running torch on the same 2 cores slow each other far more than 2x (their OpenMP
threads spin against each other); that load shows up as involuntary context switches. A
replay that shared the machine with a training run and a second replay took 498 s where the
run's own update had taken 88 s. Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import mars_core.run.threads  # noqa: E402,F401  (first: the thread settings, before torch loads)


def replay(run: Path, k: int, repeat: int, sets: list[str] | None = None) -> list[dict]:
    """`repeat` updates of iteration k in this process: one row of figures each; `sets`
    (`key=value`) change the run's config for the replay (e.g. optim.micro_batch_tokens=2048)."""
    from mars_core.models.precision import cpu_description  # noqa: F401 (imports torch first)
    from mars_core.config import load_config
    from tasks.train import _train_torch

    cfg = load_config(run / "config.yaml", sets or [])
    rows = []
    for _ in range(repeat):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="update-bench-") as out:
            metrics = _train_torch(cfg, str(run), k, Path(out))
        after = resource.getrusage(resource.RUSAGE_SELF)
        rows.append({"wall_s": time.perf_counter() - start,
                     "peak_rss_gb": after.ru_maxrss / 2**20,  # kB on Linux
                     "minor_faults": after.ru_minflt - before.ru_minflt,
                     "major_faults": after.ru_majflt - before.ru_majflt,
                     "voluntary_switches": after.ru_nvcsw - before.ru_nvcsw,
                     "involuntary_switches": after.ru_nivcsw - before.ru_nivcsw,
                     "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
                     "samples": metrics.get("samples", 0.0),
                     "optimizer_steps": metrics.get("optimizer_steps", 0.0)})
    return rows


def _child(args: argparse.Namespace, env: dict, repeat: int) -> list[dict]:
    cmd = [sys.executable, __file__, "--run", str(args.run), "--iteration", str(args.iteration),
           "--repeat", str(repeat), "--json", *(f"--set={kv}" for kv in args.set)]
    done = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"update_bench: the replay failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, required=True, help="a run folder with a finished iteration")
    p.add_argument("--iteration", type=int, required=True, help="whose update to replay")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--fresh", action="store_true", help="each update in a process of its own")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config change for the replay, e.g. optim.micro_batch_tokens=2048")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a child's output
    args = p.parse_args()
    if args.json:
        print(json.dumps(replay(args.run, args.iteration, args.repeat, args.set)))
        return
    env = dict(e.split("=", 1) for e in args.env)
    from mars_core.models.precision import cpu_description

    print(f"machine: {cpu_description()}; run {args.run}, iteration {args.iteration}; "
          f"env {env or 'unchanged'}; config {args.set or 'as run'}; "
          f"{'a fresh process per update' if args.fresh else 'one process'}")
    rows = ([r for _ in range(args.repeat) for r in _child(args, env, 1)] if args.fresh
            else _child(args, env, args.repeat))
    keys = list(rows[0])
    print("| update | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for i, r in enumerate(rows):
        print(f"| {i} | " + " | ".join(f"{r[k]:.2f}" if isinstance(r[k], float) else str(r[k])
                                      for k in keys) + " |")
    walls = [r["wall_s"] for r in rows]
    print(f"wall: fastest {min(walls):.1f} s, slowest {max(walls):.1f} s "
          f"(x{max(walls) / min(walls):.2f}), mean {sum(walls) / len(walls):.1f} s")


if __name__ == "__main__":
    main()
