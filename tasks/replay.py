"""Task: each iteration's replay pages, after `compute_advantages` (so the pages show the
advantages the trainer will use).

`write_iteration_replays` picks `tracking.replays_per_iteration` episodes of the iteration
(the turns of `assign_rewards`, the advantages of `compute_advantages`), spread over outcomes
(a won, a lost, an invalid one when present) and games, writes one HTML page per episode plus
`index.html` into `iter_XXXX/replays/`, beside the picked episodes as Parquet
(`episodes.parquet`, `turns.parquet`, `advantages.parquet`), and logs
the folder to the run's MLflow run under `replays/iter_XXXX`. So `mars replay` reads either the
folder or `runs:/<run_id>/replays/iter_XXXX`. With 0 replays the stage does nothing at all.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.run.layout import (ADVANTAGES_FILE, ASSIGN_REWARDS, COMPUTE_ADVANTAGES, REPLAYS,
                                  SAMPLES_FILE, input_dir, iter_name, write_episodes)
from mars_core.viewer.replay import ReplayEpisode, load_stage, pick_spread, write_replays
from tasks.stage_runner import PUBLISH_RETRY, run_stage
from tasks.paths import read_config


def save_picked(out: Path, picked: list[ReplayEpisode]) -> None:
    """The picked episodes as a flat replay folder: episodes, turns and their advantages
    (where known)."""
    write_episodes(out, [r.episode for r in picked])
    if all(r.advantages is None for r in picked):
        return
    rows = [{"episode_id": r.episode.episode_id, "turn": t, "advantage": a}
            for r in picked for t, a in sorted((r.advantages or {}).items())]
    pl.DataFrame(rows, schema={"episode_id": pl.Utf8, "turn": pl.Int64,
                               "advantage": pl.Float64}).write_parquet(out / ADVANTAGES_FILE)


@task(task_run_name=REPLAYS + " iter_{k:04d}", cache_policy=NO_CACHE, **PUBLISH_RETRY)
def write_iteration_replays(run_dir: str, k: int) -> dict:
    """Iteration k's replay pages (resumable; logged to MLflow once the pages exist)."""
    cfg = read_config(Path(run_dir))
    n = cfg.tracking.replays_per_iteration
    if n == 0:
        return {}

    def body(out: Path) -> dict:
        turns = input_dir(run_dir, k, reader=REPLAYS, stage=ASSIGN_REWARDS)
        samples = input_dir(run_dir, k, reader=REPLAYS, stage=COMPUTE_ADVANTAGES) / SAMPLES_FILE
        picked = pick_spread(load_stage(turns, samples, k), n)
        pages = write_replays(picked, out, prompt=cfg.rollout.prompt)
        save_picked(out, picked)
        return {"replays/pages": float(len(pages))}

    return run_stage(run_dir, k, REPLAYS, body, step=None, artifacts=(".",),
                     artifact_path=f"{REPLAYS}/{iter_name(k)}")
