"""Scale-out: rollout games per second for 1, 2 and 4 shards on a local Ray cluster, and
where the time goes. Prints figures; asserts nothing.

    python bench/scale.py [--episodes 16] [--shards 1,2,4] [--cpus 2] [--max-new-tokens 24]

(`--shards 2,2`: the same setting twice in one process, the second on Ray's warm workers.)

One Ray node with `--cpus` CPUs is started here (`ray start --head`) and stopped at the end.
Each setting plays the same iteration-0 plan of the smoke preset (Tic-Tac-Toe self-play) with
the embedded model, through the real path: `generate_rollouts`' shards as Prefect task runs
on prefect-ray's task runner, each shard with its own engine and one torch thread per CPU it
asked Ray for. With more shards than CPUs, shards share CPUs (cpus_per_shard = cpus/shards),
so the ceiling on this machine is `--cpus` x one shard's speed.

Where the time goes, summed over shards: load (each shard loads the model), engine (batched
generation), games (game logic, prompts, validation); per stage: scheduling (the stage's wall
time beyond its slowest shard: Ray and Prefect starting the task runs) and transfers (reading
the shards' Parquet back and merging).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mars_core.run.threads  # noqa: E402,F401  (first: the thread settings, before torch loads)
from mars_core.run import offline  # noqa: E402

offline.apply()
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="mars-bench-prefect-"))

from prefect import flow  # noqa: E402

from mars_core.config import load_config  # noqa: E402
from mars_core.models.weights import resolve_model  # noqa: E402
from mars_core.run.procgroup import free_port, start_group, stop_group  # noqa: E402
from mars_core.run.commit import write_json  # noqa: E402
from mars_core.run.seeds import Stream  # noqa: E402
from tasks.stage_runner import derive_seed  # noqa: E402
from mars_core.run.layout import INIT, POLICY_FILE, PREPARE_POLICY, stage_dir  # noqa: E402
from tasks.paths import prepare_run_dir  # noqa: E402
from tasks.rollout import _sharded, plan_iteration  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _cluster(cpus: int, temp: str):
    port = free_port()
    ray = str(Path(sys.executable).with_name("ray"))
    log = open(Path(temp) / "ray.log", "w")
    proc = start_group([ray, "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}",
                        f"--temp-dir={temp}", "--include-dashboard=false",
                        "--node-ip-address=127.0.0.1", "--disable-usage-stats"],
                       Path(temp) / "head.pid", env={**os.environ, "PYTHONPATH": str(REPO)},
                       stdout=log)
    import ray as ray_api

    end = time.time() + 180
    while True:
        try:
            ray_api.init(address=f"127.0.0.1:{port}", logging_level="ERROR")
            ray_api.shutdown()
            break
        except Exception:
            if proc.poll() is not None or time.time() > end:
                raise
            time.sleep(1)
    return proc, f"127.0.0.1:{port}", Path(temp) / "head.pid"


@flow(name="bench-scale")
def _rollout(run_dir: str, n: int):
    cfg = _CFG[run_dir]
    cfg_n = len(plan_iteration(cfg, run_dir, 0, derive_seed(cfg, Stream.ROLLOUTS, 0)))
    start = time.perf_counter()
    episodes, stats, metrics = _sharded(_CFG[run_dir], run_dir, 0, cfg_n)
    return time.perf_counter() - start, episodes, stats, metrics


_CFG: dict = {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--shards", default="1,2,4")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    args = ap.parse_args()
    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    model = str(resolve_model("embedded"))
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    proc, address, pid_file = _cluster(args.cpus, temp)
    rows = []
    try:
        for i, n in enumerate(int(x) for x in args.shards.split(",")):
            per = min(1.0, args.cpus / n)
            run_dir = str(Path(temp) / f"runs/{i}-shards{n}")  # a setting twice: warm workers
            cfg = load_config(REPO / "configs/smoke.yaml", [
                f"model.path={model}", f"rollout.episodes_per_iteration={args.episodes}",
                f"rollout.max_new_tokens={args.max_new_tokens}", f"cluster.shards={n}",
                f"cluster.ray.address={address}", f"cluster.ray.cpus_per_shard={per}",
                f"cluster.ray.env={{OMP_NUM_THREADS: '{max(1, int(per))}'}}"])
            prepare_run_dir(Path(run_dir), cfg)
            _CFG[run_dir] = cfg
            init = stage_dir(run_dir, INIT, PREPARE_POLICY)
            init.mkdir(parents=True)
            write_json(init / POLICY_FILE, {"path": model, "base": model})
            wall, episodes, stats, m = _rollout(run_dir, n)
            shard_wall = m["time/rollout_shards_wall"]
            rows.append({
                "shards": n, "games": len(episodes), "wall_s": wall,
                "games_per_s": len(episodes) / wall, "tokens": stats.generated_tokens,
                "load_s": m["time/rollout_shard_load"], "engine_s": m["time/rollout_shard_engine"],
                "games_s": m["time/rollout_shard_games"],
                "scheduling_s": shard_wall - m["time/rollout_shard_max"],
                "transfers_s": wall - shard_wall, "nodes": m["rollout/shard_nodes"]})
            print(f"{n} shard(s): {rows[-1]['games_per_s']:.3f} games/s "
                  f"({len(episodes)} games in {wall:.1f} s)", flush=True)
    finally:
        stop_group(proc, pid_file, grace_s=20)
    base = rows[0]["games_per_s"]
    print(f"\n{'shards':>6} {'games/s':>8} {'speed-up':>8} {'of 2x':>6} {'wall s':>7} "
          f"{'load s':>7} {'engine s':>8} {'games s':>7} {'sched s':>7} {'merge s':>7}")
    for r in rows:
        up = r["games_per_s"] / base
        print(f"{r['shards']:>6} {r['games_per_s']:>8.3f} {up:>7.2f}x {up / args.cpus:>6.0%} "
              f"{r['wall_s']:>7.1f} {r['load_s']:>7.1f} {r['engine_s']:>8.1f} {r['games_s']:>7.1f} "
              f"{r['scheduling_s']:>7.1f} {r['transfers_s']:>7.2f}")
    fits = [r for r in rows if r["shards"] <= args.cpus] or rows  # no shared CPUs
    last = fits[-1]
    load = last["load_s"] / last["shards"]
    fixed = load + last["scheduling_s"]
    print(f"\nper-shard fixed cost ({last['shards']} shard(s), a CPU each): {fixed:.1f} s (model "
          f"load {load:.1f} s, task start {last['scheduling_s']:.1f} s): a shard that plays for "
          f"{10 * fixed:.0f} s spends a tenth of its time there, whatever the number of nodes "
          f"(each shard loads its own engine; the merge reads {rows[-1]['games']} games in "
          f"{rows[-1]['transfers_s']:.2f} s)")


if __name__ == "__main__":
    main()
