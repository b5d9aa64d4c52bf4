"""Task: the training batch: the policy's eligible turns (gated steps are left out) with their
advantages (by estimator name)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.advantages import compute_advantages as estimate
from tasks.common import run_stage
from tasks.paths import read_config, stage_dir
from tasks.postprocess import STAGE as REWARDS

STAGE = "compute_advantages"


def advantage_options(cfg) -> dict:
    a = cfg.algorithm
    options: dict = {"group_keys": tuple(a.group_keys)}
    if a.estimator == "mars":
        options["normalize_std"] = a.normalize_std
    return options


@task(name="compute_advantages", cache_policy=NO_CACHE)
def compute_advantages(run_dir: str, k: int) -> dict:
    cfg = read_config(Path(run_dir))

    def body(out: Path) -> dict:
        turns = pl.read_parquet(stage_dir(run_dir, k, REWARDS) / "turns.parquet")
        turns = turns.filter((pl.col("agent") == "policy") & pl.col("eligible"))
        with_adv = estimate(turns, cfg.algorithm.estimator, **advantage_options(cfg))
        samples = with_adv.filter(pl.col("completion_ids").list.len() > 0).select(
            "episode_id", "game", "role", "turn", "reward", "advantage", "prompt_ids",
            "completion_ids", "logprobs")
        samples.write_parquet(out / "samples.parquet")
        adv = samples["advantage"]
        return {"batch/samples": float(len(samples)),
                "batch/advantage_mean": float(adv.mean() or 0.0),
                "batch/advantage_std": float(adv.std() or 0.0),
                "batch/advantage_abs_max": float(adv.abs().max() or 0.0)}

    return run_stage(run_dir, k, STAGE, body, step=k)
