"""Plain-loop twins of the estimators in `mars_core.advantages.vectorised`: slow, obvious python loops over
the rows, the ground truth the unit tests hold the vectorised versions to. Each returns the
advantages as a list in row order (`rae_update_reference` returns the new state dict). Not used
by the pipeline."""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import polars as pl

from mars_core.advantages.vectorised import (DISTINCT_DECIMALS, _check_columns, check_mc_columns,
                                             rae_key)
from mars_core.types import decode_action_values


def _rows(df: pl.DataFrame, group_keys: Sequence[str]) -> tuple[list[dict], list[str]]:
    keys = _check_columns(df, group_keys)
    return list(df.iter_rows(named=True)), keys


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population std (ddof=0)."""
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _whiten(values: list[float], eps: float) -> list[float]:
    """`(x - mean) / (std + eps)` over the whole list."""
    if not values:
        return []
    mean, std = _mean_std(values)
    return [(v - mean) / (std + eps) for v in values]


def _group(row: dict, keys: Sequence[str]) -> tuple:
    return tuple(row[k] for k in keys)


def _returns_to_go(rows: list[dict], values: list[float]) -> list[float]:
    """`G_k = sum_{j >= k} values_j` within each trajectory (episode_id, player), by turn."""
    by_traj: dict[tuple, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_traj[(row["episode_id"], row["player"])].append(i)
    out = [0.0] * len(rows)
    for idx in by_traj.values():
        running = 0.0
        for i in sorted(idx, key=lambda i: rows[i]["turn"], reverse=True):
            running += values[i]
            out[i] = running
    return out


def _trajectory_totals(rows: list[dict], keys: Sequence[str]) -> tuple[dict, dict]:
    """Per trajectory: its total reward and its group (the keys of its rows)."""
    totals: dict[tuple, float] = defaultdict(float)
    group_of: dict[tuple, tuple] = {}
    for row in rows:
        traj = (row["episode_id"], row["player"])
        totals[traj] += row["reward"]
        group_of[traj] = _group(row, keys)
    return totals, group_of


def mars_turn_level_reference(
    df: pl.DataFrame,
    group_keys: Sequence[str] = ("game", "role"),
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> list[float]:
    """Loop version of `mars_turn_level`."""
    rows, keys = _rows(df, group_keys)
    returns = _returns_to_go(rows, [float(row["reward"]) for row in rows])
    by_group: dict[tuple, list[float]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_group[_group(row, keys)].append(returns[i])
    out = []
    for i, row in enumerate(rows):
        mean, std = _mean_std(by_group[_group(row, keys)])
        adv = returns[i] - mean
        out.append(adv / (std + eps) if normalize_std else adv)
    return out


def mars_shared_reference(
    df: pl.DataFrame,
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> list[float]:
    """Loop version of `mars_shared`: `mars_turn_level_reference` grouped by game alone."""
    return mars_turn_level_reference(df, group_keys=("game",), normalize_std=normalize_std,
                                     eps=eps)


def mars_code_reference(
    df: pl.DataFrame,
    group_keys: Sequence[str] = ("game", "role"),
    eps: float = 1e-6,
) -> list[float]:
    """Loop version of `mars_code` (steps a to e)."""
    rows, keys = _rows(df, group_keys)
    rewards: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        rewards[_group(row, keys)].append(float(row["reward"]))
    r1 = [row["reward"] - _mean_std(rewards[_group(row, keys)])[0] for row in rows]  # (a)
    returns = _returns_to_go(rows, _whiten(r1, eps))  # (b), (c)
    distinct: dict[tuple, set[float]] = defaultdict(set)
    for i, row in enumerate(rows):
        distinct[_group(row, keys)].add(round(returns[i], DISTINCT_DECIMALS))
    d = []
    for i, row in enumerate(rows):  # (d)
        values = distinct[_group(row, keys)]
        d.append(returns[i] - sum(values) / len(values))
    return _whiten(d, eps)  # (e)


def grpo_trajectory_reference(
    df: pl.DataFrame,
    group_keys: Sequence[str] = ("game", "role"),
    eps: float = 1e-6,
) -> list[float]:
    """Loop version of `grpo_trajectory`."""
    rows, keys = _rows(df, group_keys)
    totals, group_of = _trajectory_totals(rows, keys)
    by_group: dict[tuple, list[float]] = defaultdict(list)
    for traj, total in totals.items():
        by_group[group_of[traj]].append(total)
    out = []
    for row in rows:
        traj = (row["episode_id"], row["player"])
        mean, std = _mean_std(by_group[group_of[traj]])
        out.append((totals[traj] - mean) / (std + eps))
    return out


def rae_reference(
    df: pl.DataFrame,
    baselines: Mapping[str, float] | None = None,
    group_keys: Sequence[str] = ("game", "role"),
) -> list[float]:
    """Loop version of `rae`: `A = R - b[group]`, b read from `baselines` (missing: 0)."""
    rows, keys = _rows(df, group_keys)
    state = dict(baselines or {})
    totals, group_of = _trajectory_totals(rows, keys)
    out = []
    for row in rows:
        traj = (row["episode_id"], row["player"])
        out.append(totals[traj] - state.get(rae_key(group_of[traj]), 0.0))
    return out


def rae_update_reference(
    baselines: Mapping[str, float] | None,
    df: pl.DataFrame,
    group_keys: Sequence[str] = ("game", "role"),
    decay: float = 0.95,
) -> dict[str, float]:
    """Loop version of `rae_update`: one EMA step per group with its batch mean return."""
    rows, keys = _rows(df, group_keys)
    state = dict(baselines or {})
    totals, group_of = _trajectory_totals(rows, keys)
    by_group: dict[tuple, list[float]] = defaultdict(list)
    for traj, total in totals.items():
        by_group[group_of[traj]].append(total)
    for group, values in by_group.items():
        key = rae_key(group)
        state[key] = decay * state.get(key, 0.0) + (1.0 - decay) * sum(values) / len(values)
    return dict(sorted(state.items()))


def rloo_env_reference(df: pl.DataFrame, group_keys: Sequence[str] = ("game",)) -> list[float]:
    """Loop version of `rloo_env`: each row minus the mean reward of the other rows of its
    group (0 when it is alone)."""
    rows, keys = _rows(df, group_keys)
    out = []
    for i, row in enumerate(rows):
        others = [float(o["reward"]) for j, o in enumerate(rows)
                  if j != i and _group(o, keys) == _group(row, keys)]
        out.append(row["reward"] - sum(others) / len(others) if others else 0.0)
    return out


def monte_carlo_reference(df: pl.DataFrame) -> list[float]:
    """Loop version of `monte_carlo`: the played action's value (or the game reward, where the
    turn played none that was measured) minus the mean value of its state; 0 without values."""
    rows, _ = _rows(df, ("game",))
    check_mc_columns(df)
    out = []
    for row in rows:
        values = decode_action_values(row["action_values"])
        if not values:
            out.append(0.0)
            continue
        q = values[row["action"]] if row["valid"] and row["action"] in values \
            else float(row["game_reward"])
        out.append(q - sum(values.values()) / len(values))
    return out
