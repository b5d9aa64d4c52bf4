"""Advantage estimators: each vectorised estimator against its plain loop, row order, and the
registry of names and options."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from mars_core.advantages.vectorised import (
                                             grpo_trajectory,
                                             mars_code,
                                             mars_shared,
                                             mars_turn_level,
                                             rae,
                                             rae_key,
                                             rae_update,
                                             rloo_env,
                                             )
from mars_core.advantages.reference import (
                                            grpo_trajectory_reference,
                                            mars_code_reference,
                                            mars_turn_level_reference,
                                            rae_reference,
                                            rae_update_reference,
                                            rloo_env_reference,
                                            )
from mars_core.advantages.estimators import ESTIMATORS, compute_advantages
from tests.unit.advantage_tables import (COLUMNS, EPS, KUHN, P0, TTT_RETURNS, frame,
                                         random_turns, tic_tac_toe)


# ------------------------------------------------------------------------------ loops, row order

REFERENCE_CASES = [
    ("mars", mars_turn_level_reference, {}),
    ("mars", mars_turn_level_reference, {"group_keys": ("game",), "normalize_std": True}),
    ("mars", mars_turn_level_reference, {"normalize_std": True}),
    ("mars_shared", lambda df, **o: mars_turn_level_reference(df, ("game",), **o), {}),
    ("mars_shared", lambda df, **o: mars_turn_level_reference(df, ("game",), **o),
     {"normalize_std": True}),
    ("mars_code", mars_code_reference, {}),
    ("mars_code", mars_code_reference, {"group_keys": ("game",)}),
    ("grpo_trajectory", grpo_trajectory_reference, {}),
    ("rae", rae_reference, {"baselines": {"tic_tac_toe|player_0": 0.3, KUHN: -1.2}}),
    ("rae", rae_reference, {"group_keys": ("game",), "baselines": {"kuhn_poker": 0.7}}),
    ("rloo_env", rloo_env_reference, {}),
    ("rloo_env", rloo_env_reference, {"group_keys": ("game", "role")}),
]
CASE_IDS = [f"{c[0]}-{i}" for i, c in enumerate(REFERENCE_CASES)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize(("name", "reference", "options"), REFERENCE_CASES, ids=CASE_IDS)
def test_every_estimator_matches_its_loop(name, reference, options, seed, ties):
    df = random_turns(seed, ties=ties)
    out = compute_advantages(df, name, **options)
    assert out.drop("advantage").equals(df)
    np.testing.assert_allclose(out["advantage"].to_numpy(), reference(df, **options),
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("keys", [("game", "role"), ("game",)])
def test_rae_update_matches_its_loop(seed, keys):
    df = random_turns(seed)
    state = {rae_key(("kuhn_poker", "player_1")[: len(keys)]): 0.4, "other|x": -2.0}
    new = rae_update(state, df, group_keys=keys, decay=0.9)
    ref = rae_update_reference(state, df, group_keys=keys, decay=0.9)
    assert list(new) == list(ref)
    assert new == pytest.approx(ref, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize(("name", "reference", "options"), REFERENCE_CASES, ids=CASE_IDS)
def test_row_order_does_not_matter(name, reference, options, seed, ties):
    df = random_turns(seed, ties=ties)
    shuffled = df.sample(fraction=1.0, shuffle=True, seed=seed + 100)
    a = compute_advantages(df, name, **options).sort("note")
    b = compute_advantages(shuffled, name, **options).sort("note")
    assert a.drop("advantage").equals(b.drop("advantage"))
    np.testing.assert_allclose(a["advantage"].to_numpy(), b["advantage"].to_numpy(),
                               rtol=1e-9, atol=1e-9)


def test_rae_update_row_order_does_not_matter():
    df = random_turns(5)
    shuffled = df.sample(fraction=1.0, shuffle=True, seed=9)
    a, b = rae_update({"x": 1.0}, df), rae_update({"x": 1.0}, shuffled)
    assert list(a) == list(b) and a == pytest.approx(b, rel=1e-12, abs=1e-12)


# -------------------------------------------------------- GRPO (trajectory level, "w/o turn-level")


def test_grpo_trajectory_two_trajectories_per_group_give_plus_minus_one():
    # totals: p0 e1 1.15, e2 -0.85 (mean 0.15, std 1.0); p1 e1 -0.90, e2 1.15 (mean 0.125,
    # std 1.025); two trajectories always land at +-std/(std+eps)
    out = grpo_trajectory(tic_tac_toe())
    sign = [1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1]
    expected = [s * (1.0 / (1.0 + EPS) if r == "player_0" else 1.025 / (1.025 + EPS))
                for s, r in zip(sign, tic_tac_toe()["role"].to_list())]
    np.testing.assert_allclose(out["advantage"].to_numpy(), expected, rtol=1e-12)


def test_grpo_trajectory_counts_each_trajectory_once_by_hand():
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
def test_grpo_trajectory_matches_loop_reference(seed, keys):
    df = random_turns(seed)
    out = grpo_trajectory(df, group_keys=keys)
    ref = grpo_trajectory_reference(df, group_keys=keys)
    assert out.drop("advantage").equals(df)
    np.testing.assert_allclose(out["advantage"].to_numpy(), ref, rtol=1e-9, atol=1e-9)


def test_grpo_trajectory_same_advantage_for_every_turn_of_a_trajectory():
    out = grpo_trajectory(random_turns(7))
    spread = out.group_by("episode_id", "role").agg(pl.col("advantage").n_unique().alias("n"))
    assert spread["n"].max() == 1


# ------------------------------------------------------------------------------ registry, errors

NAMES = ["mars", "mars_code", "grpo_trajectory", "mars_shared", "rae", "rloo_env"]
WITH_GROUP_KEYS = ["mars", "mars_code", "grpo_trajectory", "rae", "rloo_env"]


def test_registry_names():
    assert list(ESTIMATORS) == [*NAMES, "monte_carlo"]  # its own tests: tests/unit/test_mc_values.py
    df = tic_tac_toe()
    assert compute_advantages(df, "mars").equals(mars_turn_level(df))
    assert compute_advantages(df, "grpo_trajectory", group_keys=("game",)).equals(
        grpo_trajectory(df, group_keys=("game",)))
    np.testing.assert_allclose(
        compute_advantages(df, "mars", group_keys=("game",))["advantage"].to_numpy(),
        [g - 2.05 / 11 for g in TTT_RETURNS], atol=1e-12)


@pytest.mark.parametrize(("name", "fn", "options"), [
    ("mars", mars_turn_level, {"group_keys": ("game",), "normalize_std": True}),
    ("mars_code", mars_code, {"group_keys": ("game",)}),
    ("grpo_trajectory", grpo_trajectory, {}),
    ("mars_shared", mars_shared, {"normalize_std": True}),
    ("rae", rae, {"group_keys": ("game", "role"), "baselines": {P0: 0.5}}),
    ("rloo_env", rloo_env, {"group_keys": ("game", "role")}),
])
def test_dispatch_every_name(name, fn, options):
    df = random_turns(3)
    assert compute_advantages(df, name, **options).equals(fn(df, **options))


def test_unknown_estimator_name():
    with pytest.raises(ValueError) as err:
        compute_advantages(tic_tac_toe(), "grpo")
    assert str(err.value) == ("unknown advantage estimator 'grpo'; choose one of: "
                              "mars, mars_code, grpo_trajectory, mars_shared, rae, rloo_env, "
                              "monte_carlo")


def test_unknown_option_is_named():
    with pytest.raises(ValueError) as err:
        compute_advantages(tic_tac_toe(), "mars_shared", group_keys=("game", "role"))
    assert str(err.value) == ("advantage estimator 'mars_shared' takes no option 'group_keys'; "
                              "it takes: normalize_std, eps")
    with pytest.raises(ValueError, match="'normalize_std'"):
        compute_advantages(tic_tac_toe(), "rloo_env", normalize_std=True)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("column", COLUMNS)
def test_missing_column_is_named(name, column):
    with pytest.raises(ValueError, match=f"'{column}'"):
        compute_advantages(tic_tac_toe().drop(column), name)


@pytest.mark.parametrize("name", WITH_GROUP_KEYS)
def test_missing_group_key_is_named(name):
    with pytest.raises(ValueError, match="'seat_kind'"):
        compute_advantages(tic_tac_toe(), name, group_keys=("game", "seat_kind"))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("reward", "message"), [
    ([None] + [0.0] * 10, "null"), ([float("nan")] + [0.0] * 10, "non-finite"),
    (["x"] * 11, "numeric")])
def test_bad_rewards(name, reward, message):
    df = tic_tac_toe().with_columns(pl.Series("reward", reward))
    with pytest.raises(ValueError, match=message):
        compute_advantages(df, name)


@pytest.mark.parametrize("name", ["grpo_trajectory", "rae"])
def test_group_key_must_be_constant_within_a_trajectory(name):
    df = tic_tac_toe().with_columns(pl.Series("seat", ["a", "a"] + ["b"] * 9))
    with pytest.raises(ValueError, match="'seat' changes within a trajectory"):
        compute_advantages(df, name, group_keys=("game", "seat"))


@pytest.mark.parametrize("name", NAMES)
def test_empty_batch(name):
    out = compute_advantages(tic_tac_toe().head(0), name)
    assert out.columns == [*COLUMNS, "advantage"] and out.height == 0
    assert out["advantage"].dtype == pl.Float64


def test_rae_update_on_empty_batch_keeps_state():
    assert rae_update({"b": 1.0, "a": 2.0}, tic_tac_toe().head(0)) == {"a": 2.0, "b": 1.0}


@pytest.mark.parametrize("name", NAMES)
def test_integer_rewards_and_existing_advantage_column(name):
    df = tic_tac_toe().with_columns((pl.col("reward") * 20).round().cast(pl.Int64),
                                    pl.lit("stale").alias("advantage"))
    out = compute_advantages(df, name)
    assert out.columns == df.columns and out["advantage"].dtype == pl.Float64
    assert out.drop("advantage").equals(df.drop("advantage"))


# ---------------------------------------------------------------------------------------------
# Two seats that share a role (Secret Mafia: two Mafia) are two trajectories


def two_mafia() -> pl.DataFrame:
    """Seats 0 and 2 are both `mafia`, seat 1 a villager; their turns interleave."""
    return pl.DataFrame({
        "episode_id": ["m"] * 5, "game": ["secret_mafia"] * 5, "player": [0, 2, 1, 0, 2],
        "role": ["mafia", "mafia", "villager", "mafia", "mafia"], "turn": [0, 1, 2, 3, 4],
        "reward": [1.0, -1.0, 0.3, 0.5, 0.0]})


@pytest.mark.parametrize(("name", "options", "expected"), [
    # G: seat 0 -> 1.5, 0.5; seat 2 -> -1.0, 0.0; the mafia mean over its 4 turns is 0.25
    ("mars", {}, [1.25, -1.25, 0.0, 0.25, -0.25]),
    # returns: seat 0 1.5, seat 2 -1.0 -> mean 0.25, std 1.25 -> +-1 (the lone villager 0)
    ("grpo_trajectory", {}, [1.0, -1.0, 0.0, 1.0, -1.0]),
    ("rae", {}, [1.5, -1.0, 0.3, 1.5, -1.0]),
])
def test_seats_sharing_a_role_keep_their_own_returns(name, options, expected):
    out = compute_advantages(two_mafia(), name, **options)["advantage"].to_list()
    assert out == pytest.approx(expected, abs=1e-5)


def test_mars_code_sums_rewards_within_a_seat_only():
    df = two_mafia()
    out = mars_code(df)["advantage"].to_list()
    assert out == pytest.approx(mars_code_reference(df), abs=1e-9)
    # seat 2's last turn (reward 0, G 0 in its own trajectory) and seat 0's (G 0.5 from its
    # own reward only) differ; keyed by role, both would carry the other seat's rewards
    merged = df.with_columns(pl.lit(0, dtype=pl.Int64).alias("player"))
    assert mars_code(merged)["advantage"].to_list() != pytest.approx(out)
