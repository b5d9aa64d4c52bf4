"""Advantage estimators: hand-computed tables, loop-vs-vectorised agreement, error messages."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from mars_core.advantages import (
    ESTIMATORS,
    compute_advantages,
    grpo_trajectory,
    grpo_trajectory_reference,
    mars_turn_level,
    mars_turn_level_reference,
)

COLUMNS = ["episode_id", "game", "role", "turn", "reward"]
EPS = 1e-6


def frame(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=COLUMNS, orient="row")


def tic_tac_toe() -> pl.DataFrame:
    """Two Tic-Tac-Toe games. e1: player_0 wins on move 4 (player_1's loss is credited to its
    own last turn, move 3). e2: player_1 wins on move 5. +0.05 per valid move."""
    return frame([
        ("e1", "tic_tac_toe", "player_0", 0, 0.05),
        ("e1", "tic_tac_toe", "player_1", 1, 0.05),
        ("e1", "tic_tac_toe", "player_0", 2, 0.05),
        ("e1", "tic_tac_toe", "player_1", 3, -0.95),
        ("e1", "tic_tac_toe", "player_0", 4, 1.05),
        ("e2", "tic_tac_toe", "player_0", 0, 0.05),
        ("e2", "tic_tac_toe", "player_1", 1, 0.05),
        ("e2", "tic_tac_toe", "player_0", 2, 0.05),
        ("e2", "tic_tac_toe", "player_1", 3, 0.05),
        ("e2", "tic_tac_toe", "player_0", 4, -0.95),
        ("e2", "tic_tac_toe", "player_1", 5, 1.05),
    ])


# Returns-to-go G_k of the table above, row by row (worked out by hand):
# e1 p0: 1.15, 1.10, 1.05   e1 p1: -0.90, -0.95
# e2 p0: -0.85, -0.90, -0.95   e2 p1: 1.15, 1.10, 1.05
TTT_RETURNS = [1.15, -0.90, 1.10, -0.95, 1.05, -0.85, 1.15, -0.90, 1.10, -0.95, 1.05]
# player_0 mean G = (3.30 - 2.70) / 6 = 0.10; player_1 mean G = (3.30 - 1.85) / 5 = 0.29
TTT_MARS = [1.05, -1.19, 1.00, -1.24, 0.95, -0.95, 0.86, -1.00, 0.81, -1.05, 0.76]


def random_turns(seed: int, n_episodes: int = 12) -> pl.DataFrame:
    """A random batch: 2 games, 2 roles, 1-7 moves per episode, non-contiguous turns within a
    trajectory, rows shuffled, plus an extra column that must survive."""
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(n_episodes):
        game = ["tic_tac_toe", "kuhn_poker"][int(rng.integers(2))]
        for t in range(int(rng.integers(1, 8))):
            role = f"player_{int(rng.integers(2))}"
            rows.append((f"ep{e}", game, role, t, float(np.round(rng.normal(), 3))))
    rows = [rows[i] for i in rng.permutation(len(rows))]
    return frame(rows).with_columns(pl.Series("note", [f"row{i}" for i in range(len(rows))]))


# ------------------------------------------------------------------------------ MARS


def test_mars_tic_tac_toe_by_hand():
    out = mars_turn_level(tic_tac_toe())
    assert out["advantage"].dtype == pl.Float64
    np.testing.assert_allclose(out["advantage"].to_numpy(), TTT_MARS, atol=1e-12)


def test_mars_normalize_std_by_hand():
    # player_0 deviations +-1.05, +-1.00, +-0.95 -> variance 6.01 / 6
    # player_1 deviations -1.19, -1.24, 0.86, 0.81, 0.76 -> variance 5.267 / 5
    std0 = math.sqrt(6.01 / 6)
    std1 = math.sqrt((1.19**2 + 1.24**2 + 0.86**2 + 0.81**2 + 0.76**2) / 5)
    roles = tic_tac_toe()["role"].to_list()
    expected = [a / ((std0 if r == "player_0" else std1) + EPS) for a, r in zip(TTT_MARS, roles)]
    out = mars_turn_level(tic_tac_toe(), normalize_std=True)
    np.testing.assert_allclose(out["advantage"].to_numpy(), expected, rtol=1e-9)


def test_mars_without_agent_specific_uses_one_baseline_per_game():
    # all 11 returns share the baseline (0.60 + 1.45) / 11
    out = mars_turn_level(tic_tac_toe(), group_keys=("game",))
    expected = [g - 2.05 / 11 for g in TTT_RETURNS]
    np.testing.assert_allclose(out["advantage"].to_numpy(), expected, atol=1e-12)
    per_role = mars_turn_level(tic_tac_toe())["advantage"].to_numpy()
    # the two keys differ by exactly the difference of baselines
    roles = np.array(out["role"].to_list())
    diff = per_role - out["advantage"].to_numpy()
    np.testing.assert_allclose(diff[roles == "player_0"], 2.05 / 11 - 0.10, atol=1e-12)
    np.testing.assert_allclose(diff[roles == "player_1"], 2.05 / 11 - 0.29, atol=1e-12)


def test_mars_non_contiguous_turns_and_shuffled_rows():
    df = tic_tac_toe()
    perm = [7, 2, 10, 0, 5, 9, 1, 4, 8, 3, 6]
    out = mars_turn_level(df[perm])
    assert out.select(COLUMNS).equals(df[perm])
    np.testing.assert_allclose(out["advantage"].to_numpy(), np.array(TTT_MARS)[perm], atol=1e-12)


def test_mars_groups_split_by_game():
    df = pl.concat([tic_tac_toe(), tic_tac_toe().with_columns(
        pl.lit("connect_four").alias("game"), (pl.col("reward") * 3).alias("reward"),
        ("c4-" + pl.col("episode_id")).alias("episode_id"))])
    out = mars_turn_level(df)
    np.testing.assert_allclose(out["advantage"].to_numpy()[:11], TTT_MARS, atol=1e-12)
    np.testing.assert_allclose(out["advantage"].to_numpy()[11:], np.array(TTT_MARS) * 3, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("keys", [("game", "role"), ("game",)])
@pytest.mark.parametrize("normalize_std", [False, True])
def test_mars_matches_loop_reference(seed, keys, normalize_std):
    df = random_turns(seed)
    out = mars_turn_level(df, group_keys=keys, normalize_std=normalize_std)
    ref = mars_turn_level_reference(df, group_keys=keys, normalize_std=normalize_std)
    assert out.drop("advantage").equals(df)
    np.testing.assert_allclose(out["advantage"].to_numpy(), ref, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------------------ GRPO


def test_grpo_two_trajectories_per_group_give_plus_minus_one():
    # totals: p0 e1 1.15, e2 -0.85 (mean 0.15, std 1.0); p1 e1 -0.90, e2 1.15 (mean 0.125,
    # std 1.025); two trajectories always land at +-std/(std+eps)
    out = grpo_trajectory(tic_tac_toe())
    sign = [1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1]
    expected = [s * (1.0 / (1.0 + EPS) if r == "player_0" else 1.025 / (1.025 + EPS))
                for s, r in zip(sign, tic_tac_toe()["role"].to_list())]
    np.testing.assert_allclose(out["advantage"].to_numpy(), expected, rtol=1e-12)


def test_grpo_counts_each_trajectory_once_by_hand():
    # player_0 totals: a = 0.5 + 0.5 = 1.0, b = -2.0, c = 3.0 + 1.0 = 4.0 -> mean 1.0, std
    # sqrt((0 + 9 + 9) / 3) = sqrt(6); per-turn weighting would give a different mean.
    # player_1 appears in one trajectory only -> 0.
    df = frame([
        ("a", "kuhn_poker", "player_0", 0, 0.5),
        ("a", "kuhn_poker", "player_0", 2, 0.5),
        ("b", "kuhn_poker", "player_0", 0, -2.0),
        ("c", "kuhn_poker", "player_0", 1, 3.0),
        ("c", "kuhn_poker", "player_1", 2, 7.0),
        ("c", "kuhn_poker", "player_0", 3, 1.0),
    ])
    s6 = math.sqrt(6.0) + EPS
    expected = [0.0, 0.0, -3.0 / s6, 3.0 / s6, 0.0, 3.0 / s6]
    np.testing.assert_allclose(grpo_trajectory(df)["advantage"].to_numpy(), expected, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("keys", [("game", "role"), ("game",)])
def test_grpo_matches_loop_reference(seed, keys):
    df = random_turns(seed)
    out = grpo_trajectory(df, group_keys=keys)
    ref = grpo_trajectory_reference(df, group_keys=keys)
    assert out.drop("advantage").equals(df)
    np.testing.assert_allclose(out["advantage"].to_numpy(), ref, rtol=1e-9, atol=1e-9)


def test_grpo_same_advantage_for_every_turn_of_a_trajectory():
    out = grpo_trajectory(random_turns(7))
    spread = out.group_by("episode_id", "role").agg(pl.col("advantage").n_unique().alias("n"))
    assert spread["n"].max() == 1


# ------------------------------------------------------------------------------ registry, errors


def test_registry_names():
    assert set(ESTIMATORS) == {"mars", "grpo"}
    df = tic_tac_toe()
    assert compute_advantages(df, "mars").equals(mars_turn_level(df))
    assert compute_advantages(df, "grpo", group_keys=("game",)).equals(
        grpo_trajectory(df, group_keys=("game",)))
    np.testing.assert_allclose(
        compute_advantages(df, "mars", group_keys=("game",))["advantage"].to_numpy(),
        [g - 2.05 / 11 for g in TTT_RETURNS], atol=1e-12)


def test_unknown_estimator_name():
    with pytest.raises(ValueError) as err:
        compute_advantages(tic_tac_toe(), "x")
    assert str(err.value) == "unknown advantage estimator 'x'; choose one of: mars, grpo"


@pytest.mark.parametrize("name", ["mars", "grpo"])
@pytest.mark.parametrize("column", COLUMNS)
def test_missing_column_is_named(name, column):
    with pytest.raises(ValueError, match=f"'{column}'"):
        compute_advantages(tic_tac_toe().drop(column), name)


@pytest.mark.parametrize("name", ["mars", "grpo"])
def test_missing_group_key_is_named(name):
    with pytest.raises(ValueError, match="'seat_kind'"):
        compute_advantages(tic_tac_toe(), name, group_keys=("game", "seat_kind"))


@pytest.mark.parametrize("name", ["mars", "grpo"])
def test_empty_batch(name):
    out = compute_advantages(tic_tac_toe().head(0), name)
    assert out.columns == [*COLUMNS, "advantage"] and out.height == 0


@pytest.mark.parametrize("name", ["mars", "grpo"])
def test_integer_rewards_and_existing_advantage_column(name):
    df = tic_tac_toe().with_columns((pl.col("reward") * 20).round().cast(pl.Int64),
                                    pl.lit("stale").alias("advantage"))
    out = compute_advantages(df, name)
    assert out.columns == df.columns and out["advantage"].dtype == pl.Float64
