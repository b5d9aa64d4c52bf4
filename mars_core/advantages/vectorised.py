"""Advantage estimators: pure functions over a batch of turns (SPEC section 3).

Input: a polars DataFrame with one row per turn and at least the columns
`episode_id, game, player, role, turn, reward` (see `mars_core.types.TURN_SCHEMA`). A trajectory
is one seat's turns in one episode, i.e. the rows sharing `(episode_id, player)`, ordered by
`turn` (`turn` counts the moves of all seats, so it is not contiguous within a trajectory).
The role is the baseline's group, never the trajectory's key: in Secret Mafia two seats share
the role `mafia`, and each keeps its own rewards-to-go.

Output: the same frame (same rows, same order, every input column kept) with a Float64
`advantage` column added (replaced if present). Every token of a turn's completion gets that
turn's advantage; the trainer never needs to know which estimator produced it. No estimator
depends on the order of the rows.

The estimator is picked by name from the config through its record in
`mars_core.advantages.estimators.ESTIMATORS` (one call signature, `estimate(batch, options, state) ->
(frame, state)`, and the estimator's own facts), which calls the functions here.
Each vectorised estimator has a plain-loop twin in `mars_core.advantages.reference`; the unit
tests check that they agree on random batches.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import polars as pl

from mars_core.types import ACTION_VALUES_DTYPE

TRAJECTORY_KEYS = ("episode_id", "player")  # one seat of one episode
REQUIRED_COLUMNS = ("episode_id", "game", "player", "role", "turn", "reward")
# mars_code step (d): values are compared after rounding to this many decimals, so float noise
# from summation order cannot split one value in two (the values are whitened, i.e. O(1)).
DISTINCT_DECIMALS = 9

_ROW = "__adv_row"
_RET = "__adv_return"
_VAL = "__adv_value"
_BASE = "__adv_baseline"


# ---------------------------------------------------------------------------------------------
# Input checks and shared helpers


def _check_columns(df: pl.DataFrame, group_keys: Sequence[str]) -> list[str]:
    """Raise ValueError naming the first missing column; return the group keys as a list."""
    keys = [group_keys] if isinstance(group_keys, str) else list(group_keys)
    if not keys:
        raise ValueError("group_keys must name at least one column")
    for col in (*REQUIRED_COLUMNS, *keys):
        if col not in df.columns:
            raise ValueError(f"missing required column '{col}' in the turns frame")
    reward = df["reward"]
    if not reward.dtype.is_numeric():
        raise ValueError(f"column 'reward' must be numeric, got {reward.dtype}")
    if reward.null_count():
        raise ValueError("column 'reward' has null values; every turn needs a reward")
    if not reward.cast(pl.Float64).is_finite().all():
        raise ValueError("column 'reward' has non-finite values (NaN or inf)")
    return keys


def _check_constant_keys(df: pl.DataFrame, keys: Sequence[str]) -> None:
    """Trajectory-level estimators need every group key constant within a trajectory."""
    extra = [k for k in keys if k not in TRAJECTORY_KEYS]
    if not extra or df.is_empty():
        return
    counts = df.group_by(list(TRAJECTORY_KEYS)).agg(pl.col(extra).n_unique())
    for k in extra:
        if counts[k].max() > 1:
            raise ValueError(f"group key '{k}' changes within a trajectory (episode_id, player); "
                             "trajectory-level estimators need it constant")


def check_options(name: str, takes: Sequence[str], options: Mapping[str, object]) -> None:
    """A ValueError naming the first option an estimator does not take, and those it takes."""
    for option in options:
        if option not in takes:
            raise ValueError(f"advantage estimator '{name}' takes no option '{option}'; "
                             f"it takes: {', '.join(takes)}")


def _sorted_by_trajectory(df: pl.DataFrame) -> pl.DataFrame:
    """The frame with a row-index column, sorted by trajectory then turn (stable)."""
    return df.with_row_index(_ROW).sort([*TRAJECTORY_KEYS, "turn"], maintain_order=True)


def _restore(df: pl.DataFrame, advantage: pl.Expr) -> pl.DataFrame:
    """Add `advantage`, put rows back in input order and drop the helper columns."""
    out = df.with_columns(advantage.cast(pl.Float64).alias("advantage"))
    return out.sort(_ROW).drop([c for c in out.columns if c.startswith("__adv_")])


def _trajectory_returns(df: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """One row per trajectory: `episode_id, player`, the other group keys, and `_RET` = the sum
    of the trajectory's rewards in the frame (discount 1). Rows come sorted by trajectory, so
    later means see the same summation order whatever the input order (bitwise reproducible)."""
    extra = [k for k in keys if k not in TRAJECTORY_KEYS]
    return _sorted_by_trajectory(df).group_by(list(TRAJECTORY_KEYS), maintain_order=True).agg(
        pl.col("reward").cast(pl.Float64).sum().alias(_RET), *[pl.col(k).first() for k in extra]
    )


def _per_trajectory(df: pl.DataFrame, per_traj: pl.DataFrame) -> pl.DataFrame:
    """Give every turn its trajectory's `_VAL` (per_traj: `episode_id, player, _VAL`)."""
    work = df.with_row_index(_ROW).join(per_traj, on=list(TRAJECTORY_KEYS), how="left",
                                        nulls_equal=True)
    return _restore(work, pl.col(_VAL))


def _whiten(x: pl.Expr, eps: float) -> pl.Expr:
    """`(x - mean(x)) / (std(x) + eps)` over the whole frame, population std (ddof=0)."""
    return (x - x.mean()) / (x.std(ddof=0) + eps)


def _returns_to_go(x: pl.Expr) -> pl.Expr:
    """`G_k = sum_{j >= k} x_j` within each trajectory; needs `_sorted_by_trajectory` rows."""
    return x.cum_sum(reverse=True).over(list(TRAJECTORY_KEYS))


# ---------------------------------------------------------------------------------------------
# MARS and its ablations


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
    `group_keys=("game",)` is the "w/o agent-specific" ablation (see `mars_shared`).
    Source: MARS paper (turn-level advantage, agent-specific normalisation); SPEC 3.
    """
    keys = _check_columns(df, group_keys)
    g = pl.col(_RET)
    work = _sorted_by_trajectory(df).with_columns(
        _returns_to_go(pl.col("reward").cast(pl.Float64)).alias(_RET))
    adv = g - g.mean().over(keys)
    if normalize_std:
        adv = adv / (g.std(ddof=0).over(keys) + eps)
    return _restore(work, adv)


def mars_shared(df: pl.DataFrame, normalize_std: bool = False, eps: float = 1e-6) -> pl.DataFrame:
    """MARS "w/o agent-specific" ablation: `mars_turn_level` with the group key `("game",)`,
    so every role of a game shares one baseline `mean(G)` (MARS paper, ablation table).

    Shapes: df [N rows] -> df [N rows] + `advantage` (Float64). Source: MARS paper; SPEC 3.
    """
    return mars_turn_level(df, group_keys=("game",), normalize_std=normalize_std, eps=eps)


def mars_code(
    df: pl.DataFrame,
    group_keys: Sequence[str] = ("game", "role"),
    eps: float = 1e-6,
) -> pl.DataFrame:
    """MARS advantage as the published MARS code computes it (five steps, discount 1):

    (a) `r1 = r - mean(r)` over the turns of its `group_keys` group;
    (b) `w = (r1 - mean(r1)) / (std(r1) + eps)` over the whole batch (population std);
    (c) `G_k = sum_{j >= k} w_j` within the trajectory `(episode_id, player)`, ordered by turn;
    (d) `d = G - mean(distinct G values of the group)` per `group_keys` group (each value
        counted once however many turns carry it; values compared rounded to
        `DISTINCT_DECIMALS` decimals);
    (e) `A = (d - mean(d)) / (std(d) + eps)` over the whole batch.

    Zero variance (all rewards equal) gives 0 everywhere, not NaN.
    Shapes: df [N rows] -> df [N rows] + `advantage` (Float64).
    Source: the published MARS code (thu-nics/MARS, on ROLL); SPEC 3.
    """
    keys = _check_columns(df, group_keys)
    r = pl.col("reward").cast(pl.Float64)
    g = pl.col(_RET)
    work = _sorted_by_trajectory(df).with_columns((r - r.mean().over(keys)).alias(_VAL))
    work = work.with_columns(_whiten(pl.col(_VAL), eps).alias(_VAL))
    work = work.with_columns(_returns_to_go(pl.col(_VAL)).alias(_RET))
    work = work.with_columns(
        (g - g.round(DISTINCT_DECIMALS).unique().mean().over(keys)).alias(_VAL))
    return _restore(work, _whiten(pl.col(_VAL), eps))


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

    Shapes: df [N rows] -> df [N rows] + `advantage` (Float64). Source: MARS ablation; SPEC 3.
    """
    keys = _check_columns(df, group_keys)
    _check_constant_keys(df, keys)
    r = pl.col(_RET)
    per_traj = _trajectory_returns(df, keys).select(
        *TRAJECTORY_KEYS, ((r - r.mean().over(keys)) / (r.std(ddof=0).over(keys) + eps)).alias(_VAL)
    )
    return _per_trajectory(df, per_traj)


# ---------------------------------------------------------------------------------------------
# SPIRAL role-conditioned advantage estimation (RAE)


def rae_key(values: Sequence[object]) -> str:
    """The state key of a group: its values joined with "|", e.g. "tic_tac_toe|player_0"."""
    return "|".join(str(v) for v in values)


def _check_baselines(baselines: Mapping[str, float] | None) -> dict[str, float]:
    """A fresh `dict[str, float]` copy of the RAE state (None: empty), or ValueError."""
    if baselines is None:
        return {}
    if not isinstance(baselines, Mapping):
        kind = type(baselines).__name__
        raise ValueError(f"rae baselines must be a dict str -> float, got {kind}")
    out = {}
    for key, value in baselines.items():
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not isinstance(key, str) or not ok or not math.isfinite(value):
            raise ValueError(f"rae baselines: entry {key!r}: {value!r} is not str -> finite float")
        out[key] = float(value)
    return out


def rae(
    df: pl.DataFrame,
    baselines: Mapping[str, float] | None = None,
    group_keys: Sequence[str] = ("game", "role"),
) -> pl.DataFrame:
    """SPIRAL role-conditioned advantage estimation (RAE).

    `R` = a trajectory's return (sum of its turns' rewards in the frame); every turn of the
    trajectory gets `A = R - b[rae_key(group values)]`, where `b` is the EMA baseline of the
    trajectory's `group_keys` group as it stood BEFORE this batch (a missing group reads 0.0).
    This function never updates the state: call `rae_update` afterwards. (SPIRAL may also drop
    turns whose advantage is 0; that filtering is not done here.)

    baselines: JSON-able dict str -> float (None: empty). Group keys must be constant within a
    trajectory. Shapes: df [N rows] -> df [N rows] + `advantage` (Float64).
    Source: SPIRAL (role-conditioned advantage estimation); SPEC 3.
    """
    keys = _check_columns(df, group_keys)
    state = _check_baselines(baselines)
    _check_constant_keys(df, keys)
    per_traj = _trajectory_returns(df, keys)
    groups = per_traj.select(keys).unique(maintain_order=True)
    values = [state.get(rae_key(row), 0.0) for row in groups.iter_rows()]
    groups = groups.with_columns(pl.Series(_BASE, values, dtype=pl.Float64))
    per_traj = per_traj.join(groups, on=keys, how="left", nulls_equal=True).select(
        *TRAJECTORY_KEYS, (pl.col(_RET) - pl.col(_BASE)).alias(_VAL))
    return _per_trajectory(df, per_traj)


def rae_update(
    baselines: Mapping[str, float] | None,
    df: pl.DataFrame,
    group_keys: Sequence[str] = ("game", "role"),
    decay: float = 0.95,
) -> dict[str, float]:
    """The RAE state after one batch: `b <- decay * b + (1 - decay) * mean(R)` for each group
    present in df, where the mean runs over that group's trajectories in df (each counted
    once); absent groups keep their value; a new group starts from 0.

    We update once per batch with the batch mean, not trajectory by trajectory as SPIRAL's
    loop does, so the result cannot depend on the order of the rows. Returns a NEW dict
    (sorted by key, JSON-able); the input is not mutated.
    """
    keys = _check_columns(df, group_keys)
    state = _check_baselines(baselines)
    ok = isinstance(decay, (int, float)) and not isinstance(decay, bool)
    if not ok or not 0.0 <= decay <= 1.0:
        raise ValueError(f"rae decay must be a number in [0, 1], got {decay!r}")
    _check_constant_keys(df, keys)
    means = _trajectory_returns(df, keys).group_by(keys).agg(pl.col(_RET).mean())
    for *values, mean in means.select(*keys, _RET).iter_rows():
        key = rae_key(values)
        state[key] = decay * state.get(key, 0.0) + (1.0 - decay) * mean
    return dict(sorted(state.items()))


def rae_estimate(df: pl.DataFrame, options: Mapping[str, object],
                 state: Mapping[str, float] | None) -> tuple[pl.DataFrame, dict[str, float]]:
    """RAE with its state (the `rae` record's step): the advantages against the baselines as
    they stood before this batch (`rae`), and the baselines after it (`rae_update`).
    options: group_keys, decay."""
    check_options("rae", ("group_keys", "decay"), options)
    keys = {k: v for k, v in options.items() if k == "group_keys"}
    return (rae(df, baselines=state or {}, **keys),
            rae_update(state or {}, df, decay=options.get("decay", 0.95), **keys))


def rae_metrics(state: Mapping[str, float]) -> dict[str, float]:
    """One metric per baseline: `rae/baseline/<game>/<role>`."""
    return {f"rae/baseline/{key.replace('|', '/')}": v for key, v in state.items()}


# ---------------------------------------------------------------------------------------------
# In2AI leave-one-out per environment


def rloo_env(df: pl.DataFrame, group_keys: Sequence[str] = ("game",)) -> pl.DataFrame:
    """In2AI RLOO per environment on STEP rewards (not returns):
    `A_i = r_i - (sum_j r_j - r_i) / (n - 1)` over the n rows that share `group_keys`
    (the mean reward of the other steps); a group with a single row gets 0.

    Shapes: df [N rows] -> df [N rows] + `advantage` (Float64). Source: In2AI trainer; SPEC 3.
    """
    keys = _check_columns(df, group_keys)
    r = pl.col("reward").cast(pl.Float64)
    n = pl.len().over(keys)
    adv = pl.when(n > 1).then(r - (r.sum().over(keys) - r) / (n - 1)).otherwise(0.0)
    return _restore(_sorted_by_trajectory(df), adv)


# ---------------------------------------------------------------------------------------------
# Monte-Carlo action values (issue 45)

MC_COLUMNS = ("action", "valid", "game_reward", "action_values")


def check_mc_columns(df: pl.DataFrame) -> None:
    """Raise ValueError naming the first column `monte_carlo` needs that `df` lacks."""
    for col in MC_COLUMNS:
        if col not in df.columns:
            hint = " (set rollout.mc_rollouts)" if col == "action_values" else ""
            raise ValueError(f"estimator monte_carlo needs the column '{col}' in the turns "
                             f"frame{hint}")


def monte_carlo(df: pl.DataFrame) -> pl.DataFrame:
    """Per-turn advantages from the Monte-Carlo values of the turn's own state
    (`rollout.mc_rollouts`): `A = Q(s, a) - V(s)`, where Q(s, a) is the measured value of the
    action the turn played and V(s) the mean of its state's values (a uniform move's value).
    A turn that played no measured action (an invalid reply) is valued by its `game_reward`,
    the forfeit it cost, instead of Q: in the values' units, a lost game, not MARS's -10
    format penalty on top (twelve lost games' weight on the whole reply, format tokens
    included, unlearnt the format in a Tic-Tac-Toe run: docs/lab.md). A turn without values
    (none measured) gets 0. No baseline group: each turn is compared with the other moves of
    its own state.

    Shapes: df [N rows] -> df [N rows] + `advantage` (Float64). Source: VinePPO's Monte-Carlo
    values from states, with a uniform continuation (mars_core.rollout.mc_values)."""
    _check_columns(df, ("game",))
    check_mc_columns(df)
    rows = _sorted_by_trajectory(df)
    values = (rows.select(_ROW, pl.col("action").alias("__adv_action"),
                          pl.col("action_values").replace("", None)
                          .str.json_decode(ACTION_VALUES_DTYPE)
                          .alias("__adv_mc"))
              .explode("__adv_mc").unnest("__adv_mc")
              .filter(pl.col("value").is_not_null()))
    v = values.group_by(_ROW).agg(pl.col("value").mean().alias(_BASE))
    q = (values.filter(pl.col("action") == pl.col("__adv_action"))
         .group_by(_ROW).agg(pl.col("value").first().alias(_VAL)))
    joined = rows.join(v, on=_ROW, how="left").join(q, on=_ROW, how="left")
    taken = pl.when(pl.col("valid") & pl.col(_VAL).is_not_null()).then(pl.col(_VAL)) \
        .otherwise(pl.col("game_reward").cast(pl.Float64))
    adv = pl.when(pl.col(_BASE).is_not_null()).then(taken - pl.col(_BASE)).otherwise(0.0)
    return _restore(joined, adv)
