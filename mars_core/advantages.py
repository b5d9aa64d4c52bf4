"""Advantage estimators: pure functions over a batch of turns.

Input: a polars DataFrame with one row per turn and at least the columns
`episode_id, game, role, turn, reward` (see `mars_core.types.TURN_SCHEMA`). A trajectory is one
player's turns in one episode, i.e. the rows sharing `(episode_id, role)`, ordered by `turn`
(`turn` counts the moves of all seats, so it is not contiguous within a trajectory).

Output: the same frame (same rows, same order, every input column kept) with a Float64
`advantage` column added (replaced if present). Every token of a turn's completion gets that
turn's advantage; the trainer never needs to know which estimator produced it.

The estimator is picked by name from the config through `ESTIMATORS` / `compute_advantages`.
Each vectorised estimator has a plain-loop twin (`*_reference`) kept next to it; the unit tests
check that they agree on random batches.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence

import polars as pl

TRAJECTORY_KEYS = ("episode_id", "role")
REQUIRED_COLUMNS = ("episode_id", "game", "role", "turn", "reward")

_ROW = "__adv_row"
_RET = "__adv_return"


def _check_columns(df: pl.DataFrame, group_keys: Sequence[str]) -> list[str]:
    """Raise ValueError naming the first missing column; return the group keys as a list."""
    keys = [group_keys] if isinstance(group_keys, str) else list(group_keys)
    if not keys:
        raise ValueError("group_keys must name at least one column")
    for col in (*REQUIRED_COLUMNS, *keys):
        if col not in df.columns:
            raise ValueError(f"missing required column '{col}' in the turns frame")
    if df["reward"].null_count():
        raise ValueError("column 'reward' has null values; every turn needs a reward")
    return keys


def _sorted_by_trajectory(df: pl.DataFrame) -> pl.DataFrame:
    """The frame with a row-index column, sorted by trajectory then turn (stable)."""
    return df.with_row_index(_ROW).sort([*TRAJECTORY_KEYS, "turn"], maintain_order=True)


def _restore(df: pl.DataFrame, advantage: pl.Expr) -> pl.DataFrame:
    """Add `advantage`, put rows back in input order and drop the helper columns."""
    out = df.with_columns(advantage.cast(pl.Float64).alias("advantage"))
    return out.sort(_ROW).drop([c for c in out.columns if c.startswith("__adv_")])


def mars_turn_level(
    df: pl.DataFrame,
    group_keys: Sequence[str] = ("game", "role"),
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> pl.DataFrame:
    """MARS turn-level advantage (paper version).

    `G_k = sum_{j >= k} r_j` over the turns of the same trajectory (discount 1), then
    `A_k = G_k - mean(G)` where the mean runs over all turns of the batch (not trajectories)
    that share `group_keys`; with `normalize_std`, divided by that group's population std
    (ddof=0) plus `eps`.

    Shapes: df [N rows] -> df [N rows] + `advantage` (Float64).
    `group_keys=("game",)` is the "w/o agent-specific" ablation (roles share one baseline).
    """
    keys = _check_columns(df, group_keys)
    g = pl.col(_RET)
    work = _sorted_by_trajectory(df).with_columns(
        pl.col("reward").cast(pl.Float64).cum_sum(reverse=True).over(list(TRAJECTORY_KEYS)).alias(_RET)
    )
    adv = g - g.mean().over(keys)
    if normalize_std:
        adv = adv / (g.std(ddof=0).over(keys) + eps)
    return _restore(work, adv)


def grpo_trajectory(
    df: pl.DataFrame,
    group_keys: Sequence[str] = ("game", "role"),
    eps: float = 1e-6,
) -> pl.DataFrame:
    """Trajectory-level group-normalised advantage (the "w/o turn-level" ablation).

    `R` = a trajectory's total reward; every turn of the trajectory gets
    `A = (R - mean(R)) / (std(R) + eps)` with mean and population std (ddof=0) over the
    trajectories (each counted once, whatever its length) that share `group_keys`. A group with
    a single trajectory gives 0. The group keys must be constant within a trajectory.

    Shapes: df [N rows] -> df [N rows] + `advantage` (Float64).
    """
    keys = _check_columns(df, group_keys)
    traj = list(TRAJECTORY_KEYS)
    extra = [k for k in keys if k not in traj]
    per_traj = df.group_by(traj).agg(
        pl.col("reward").cast(pl.Float64).sum().alias(_RET), *[pl.col(k).first() for k in extra]
    )
    r = pl.col(_RET)
    per_traj = per_traj.select(
        *traj, ((r - r.mean().over(keys)) / (r.std(ddof=0).over(keys) + eps)).alias("__adv_value")
    )
    work = df.with_row_index(_ROW).join(per_traj, on=traj, how="left")
    return _restore(work, pl.col("__adv_value"))


# ---------------------------------------------------------------------------------------------
# Plain-loop references: slow, obvious, and the ground truth for the vectorised versions.


def _rows(df: pl.DataFrame, group_keys: Sequence[str]) -> tuple[list[dict], list[str]]:
    keys = _check_columns(df, group_keys)
    return list(df.iter_rows(named=True)), keys


def _mean_std(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def mars_turn_level_reference(
    df: pl.DataFrame,
    group_keys: Sequence[str] = ("game", "role"),
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> list[float]:
    """Loop version of `mars_turn_level`; returns the advantages in row order."""
    rows, keys = _rows(df, group_keys)
    by_traj: dict[tuple, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_traj[(row["episode_id"], row["role"])].append(i)
    returns = [0.0] * len(rows)
    for idx in by_traj.values():
        running = 0.0
        for i in sorted(idx, key=lambda i: rows[i]["turn"], reverse=True):
            running += rows[i]["reward"]
            returns[i] = running
    by_group: dict[tuple, list[float]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_group[tuple(row[k] for k in keys)].append(returns[i])
    out = []
    for i, row in enumerate(rows):
        mean, std = _mean_std(by_group[tuple(row[k] for k in keys)])
        adv = returns[i] - mean
        out.append(adv / (std + eps) if normalize_std else adv)
    return out


def grpo_trajectory_reference(
    df: pl.DataFrame,
    group_keys: Sequence[str] = ("game", "role"),
    eps: float = 1e-6,
) -> list[float]:
    """Loop version of `grpo_trajectory`; returns the advantages in row order."""
    rows, keys = _rows(df, group_keys)
    totals: dict[tuple, float] = defaultdict(float)
    group_of: dict[tuple, tuple] = {}
    for row in rows:
        traj = (row["episode_id"], row["role"])
        totals[traj] += row["reward"]
        group_of[traj] = tuple(row[k] for k in keys)
    by_group: dict[tuple, list[float]] = defaultdict(list)
    for traj, total in totals.items():
        by_group[group_of[traj]].append(total)
    out = []
    for row in rows:
        traj = (row["episode_id"], row["role"])
        mean, std = _mean_std(by_group[group_of[traj]])
        out.append((totals[traj] - mean) / (std + eps))
    return out


# ---------------------------------------------------------------------------------------------

ESTIMATORS: dict[str, Callable[..., pl.DataFrame]] = {
    "mars": mars_turn_level,
    "grpo": grpo_trajectory,
}


def compute_advantages(df: pl.DataFrame, name: str, **options) -> pl.DataFrame:
    """Run the estimator registered under `name` (see `ESTIMATORS`) with `options`."""
    if name not in ESTIMATORS:
        choices = ", ".join(ESTIMATORS)
        raise ValueError(f"unknown advantage estimator '{name}'; choose one of: {choices}")
    return ESTIMATORS[name](df, **options)
