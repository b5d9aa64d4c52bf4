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

from mars_core.run.layout import (ADVANTAGES_FILE, ASSIGN_REWARDS, COMPUTE_ADVANTAGES, REPLAYS,
                                  SAMPLES_FILE, write_episodes)
from mars_core.viewer.replay import ReplayEpisode, load_stage, pick_spread, write_replays
from tasks.stage import StageContext, iteration_stage


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


def _wanted(ctx: StageContext) -> bool:
    return ctx.cfg.tracking.replays_per_iteration != 0  # 0: no stage folder at all


@iteration_stage(REPLAYS, step=False, artifacts=(".",), artifact_path=REPLAYS + "/{iter}",
                 when=_wanted)
def write_iteration_replays(ctx: StageContext, out: Path) -> dict:
    """Iteration k's replay pages (resumable; logged to MLflow once the pages exist)."""
    samples = ctx.inputs[COMPUTE_ADVANTAGES] / SAMPLES_FILE
    picked = pick_spread(load_stage(ctx.inputs[ASSIGN_REWARDS], samples, ctx.k),
                         ctx.cfg.tracking.replays_per_iteration)
    pages = write_replays(picked, out, prompt=ctx.cfg.rollout.prompt)
    save_picked(out, picked)
    return {"replays/pages": float(len(pages))}
