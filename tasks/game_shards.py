"""A stage's games played in shards: each shard (a Prefect task run, on the Ray cluster where
one is configured) plays its slice of the plan into its own folder, and the stage merges the
shards' episodes in plan order. Used by the rollouts and the game evaluation."""
from __future__ import annotations

import os
import time
from pathlib import Path

from mars_core.rollout.play import RolloutStats
from mars_core.run.commit import read_json, write_json
from mars_core.run.layout import (PLAN_FILE, SHARD_STATS_FILE, read_episodes, shard_folder,
                                  shards_dir, write_episodes)
from mars_core.types import Episode
from tasks.shards import drop_shards, node_id, run_shards, shard_slices, write_shard


def play_shard(stage: Path, shard: int, play) -> dict:
    """Shard `shard` of a stage that plays games: `play()` -> (episodes, stats, load seconds)
    written to the shard's own folder (whole or not at all); returns how its time went: load
    (engines), engine (generation), games (the rest), and its node. A shard already there
    (from a killed attempt) is not played again."""
    def write(folder: Path) -> None:
        start = time.perf_counter()
        episodes, stats, load_s = play()
        write_episodes(folder, episodes)
        seconds = time.perf_counter() - start
        write_json(folder / SHARD_STATS_FILE, {
            "episodes": len(episodes), "generated_tokens": stats.generated_tokens,
            "load_s": load_s, "engine_s": stats.generate_seconds,
            "games_s": seconds - load_s - stats.generate_seconds, "seconds": seconds,
            "node": node_id(), "pid": os.getpid()})

    return read_json(write_shard(stage, shard, write) / SHARD_STATS_FILE)


def sharded_episodes(stage: Path, n_specs: int, cluster, shard_task, params: dict,
                     prefix: str) -> tuple[list[Episode], RolloutStats, dict]:
    """A plan of `n_specs` episodes played in `cluster.shards` runs of `shard_task(**params,
    shard=i, shards=n)` (on the Ray cluster where one is configured), merged in plan order;
    shards a killed attempt finished are kept. Metrics `<prefix>/shards`, `.../shard_nodes`
    and `time/<prefix>_shard_*`."""
    n = len(shard_slices(n_specs, cluster.shards))
    plan, plan_file = {"shards": n, "episodes": n_specs}, shards_dir(stage) / PLAN_FILE
    if plan_file.is_file() and read_json(plan_file) != plan:  # another split: start over
        drop_shards(stage)
    plan_file.parent.mkdir(parents=True, exist_ok=True)
    write_json(plan_file, plan)
    start = time.perf_counter()
    parts = run_shards(shard_task, [params | {"shard": i, "shards": n} for i in range(n)], cluster)
    wall = time.perf_counter() - start
    episodes = [ep for i in range(n) for ep in read_episodes(shard_folder(stage, i))]
    stats = RolloutStats(generated_tokens=sum(p["generated_tokens"] for p in parts),
                         generate_seconds=sum(p["engine_s"] for p in parts))
    metrics = {f"{prefix}/shards": float(n),
               f"{prefix}/shard_nodes": float(len({p["node"] for p in parts})),
               f"time/{prefix}_shards_wall": wall,
               f"time/{prefix}_shard_max": max(p["seconds"] for p in parts)}
    for key in ("load_s", "engine_s", "games_s"):
        metrics[f"time/{prefix}_shard_{key.removesuffix('_s')}"] = sum(p[key] for p in parts)
    return episodes, stats, metrics
