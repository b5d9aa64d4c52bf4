"""Advantage estimators: hand-computed tables, loop-vs-vectorised agreement, error messages."""
from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from mars_core.advantages.vectorised import (
                                             mars_code,
                                             mars_shared,
                                             mars_turn_level,
                                             rae,
                                             rae_key,
                                             rae_update,
                                             rloo_env,
                                             )
from mars_core.advantages.reference import mars_code_reference, mars_turn_level_reference
from mars_core.advantages.estimators import compute_advantages
from tests.unit.advantage_tables import (COLUMNS, EPS, KUHN, P0, P1, TTT_MARS, TTT_RETURNS, frame,
                                         random_turns, tic_tac_toe)


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
    assert mars_shared(tic_tac_toe()).equals(out)
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


# ------------------------------------------------------------------------ MARS (published code)


def test_mars_code_five_steps_by_hand():
    # (a) player_a rewards 1, 3, 2 (mean 2) -> r1 -1, 1, 0; player_b rewards 0, 2 (mean 1) -> -1, 1
    # (b) batch r1 = [-1, -1, 1, 0, 1]: mean 0, var 4/5 -> w = c * r1 with c = 1 / (sqrt(.8) + eps)
    # (c) rewards-to-go: e1 a (turns 0, 2): w = -c, c -> G = 0, c; e1 b: -c; e2 a: 0; e2 b: c
    #     rows: G = [0, -c, c, 0, c]
    # (d) player_a G values 0, c, 0 -> distinct {0, c}, mean c/2 (the per-turn mean would be
    #     c/3); player_b {-c, c}, mean 0 -> d = [-c/2, -c, c/2, -c/2, c]
    # (e) mean(d) = -c/10 -> d - mean = c * [-0.4, -0.9, 0.6, -0.4, 1.1];
    #     var = c^2 (0.16 + 0.81 + 0.36 + 0.16 + 1.21) / 5 = 0.54 c^2
    df = frame([
        ("e1", "g", "player_a", 0, 1.0),
        ("e1", "g", "player_b", 1, 0.0),
        ("e1", "g", "player_a", 2, 3.0),
        ("e2", "g", "player_a", 0, 2.0),
        ("e2", "g", "player_b", 1, 2.0),
    ])
    c = 1.0 / (math.sqrt(0.8) + EPS)
    expected = [c * v / (c * math.sqrt(0.54) + EPS) for v in (-0.4, -0.9, 0.6, -0.4, 1.1)]
    out = mars_code(df)
    assert out["advantage"].dtype == pl.Float64
    np.testing.assert_allclose(out["advantage"].to_numpy(), expected, rtol=1e-9)
    np.testing.assert_allclose(mars_code_reference(df), expected, rtol=1e-9)


# ------------------------------------------------------------------------------ hand tables, all


def scale_table() -> pl.DataFrame:
    """One game, two roles; role `big` earns about 10x role `small`. Every trajectory is a
    single turn. Returns: e1 big 10, e1 small 3, e2 big 30, e2 small 1."""
    return frame([
        ("e1", "g", "big", 0, 10.0),
        ("e1", "g", "small", 1, 3.0),
        ("e2", "g", "big", 0, 30.0),
        ("e2", "g", "small", 1, 1.0),
    ])


# mars_code on scale_table: (a) r1 = [-10, 1, 10, -1]; (b) mean 0, var (100+1+100+1)/4 = 50.5,
# w = c r1, c = 1/(sqrt(50.5)+eps); (c) single turns: G = w; (d) distinct means 0 per role;
# (e) mean 0, std c sqrt(50.5)
_C = 1.0 / (math.sqrt(50.5) + EPS)
SCALE_CASES = [
    # per-role baselines: big 20, small 2 -> the small role keeps +1 / -1
    ("mars", {}, [-10.0, 1.0, 10.0, -1.0]),
    ("mars", {"normalize_std": True},  # stds: big 10, small 1
     [-10 / (10 + EPS), 1 / (1 + EPS), 10 / (10 + EPS), -1 / (1 + EPS)]),
    ("grpo_trajectory", {}, [-10 / (10 + EPS), 1 / (1 + EPS), 10 / (10 + EPS), -1 / (1 + EPS)]),
    ("mars_code", {}, [v * _C / (_C * math.sqrt(50.5) + EPS) for v in (-10, 1, 10, -1)]),
    ("rae", {"baselines": {"g|big": 20.0, "g|small": 2.0}}, [-10.0, 1.0, 10.0, -1.0]),
    ("rloo_env", {"group_keys": ("game", "role")}, [-20.0, 2.0, 20.0, -2.0]),
    # one shared baseline (10+3+30+1)/4 = 11: both small-role turns become negative
    ("mars_shared", {}, [-1.0, -8.0, 19.0, -10.0]),
    ("rae", {"group_keys": ("game",), "baselines": {"g": 11.0}}, [-1.0, -8.0, 19.0, -10.0]),
    # A_i = r_i - (44 - r_i) / 3
    ("rloo_env", {}, [10 - 34 / 3, 3 - 41 / 3, 30 - 14 / 3, 1 - 43 / 3]),
    ("rae", {}, [10.0, 3.0, 30.0, 1.0]),  # first batch: every baseline is 0
]


@pytest.mark.parametrize(("name", "options", "expected"), SCALE_CASES)
def test_scale_table_by_hand(name, options, expected):
    out = compute_advantages(scale_table(), name, **options)
    np.testing.assert_allclose(out["advantage"].to_numpy(), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("name", "options", "expected"), SCALE_CASES[:6])
def test_per_role_grouping_keeps_the_small_roles_signal(name, options, expected):
    # the small role's better trajectory (e1, 3.0) gets a positive advantage, its worse one a
    # negative one; with a shared baseline (mars_shared, rloo_env per game) both are negative
    adv = compute_advantages(scale_table(), name, **options)["advantage"].to_list()
    assert adv[1] > 0 > adv[3]
    shared = mars_shared(scale_table())["advantage"].to_list()
    assert shared[1] < 0 and shared[3] < 0


ONE_ROW = frame([("s1", "solo", "player_0", 0, 0.4)])


@pytest.mark.parametrize(("name", "options", "expected"), [
    ("mars", {}, 0.0), ("mars", {"normalize_std": True}, 0.0), ("mars_code", {}, 0.0),
    ("grpo_trajectory", {}, 0.0), ("mars_shared", {}, 0.0), ("rloo_env", {}, 0.0),
    ("rae", {}, 0.4), ("rae", {"baselines": {"solo|player_0": 0.1}}, 0.3),
])
def test_single_turn_group_of_size_one(name, options, expected):
    out = compute_advantages(ONE_ROW, name, **options)
    assert out["advantage"].to_list() == pytest.approx([expected], abs=1e-12)


@pytest.mark.parametrize("name", ["mars", "grpo_trajectory", "mars_shared", "rloo_env"])
def test_group_of_size_one_inside_a_batch(name):
    # the solo game is its own group: 0 there, and the tic-tac-toe rows are untouched
    alone = compute_advantages(tic_tac_toe(), name)["advantage"].to_list()
    out = compute_advantages(pl.concat([tic_tac_toe(), ONE_ROW]), name)["advantage"].to_list()
    assert out == pytest.approx([*alone, 0.0], abs=1e-12)


def all_equal_rewards() -> pl.DataFrame:
    """Two episodes, two roles, two turns each, every reward 0.5: per trajectory G = 1.0, 0.5."""
    rows = []
    for e in ("e1", "e2"):
        for t in range(4):
            rows.append((e, "g", f"player_{t % 2}", t, 0.5))
    return frame(rows)


@pytest.mark.parametrize(("name", "options", "expected"), [
    # mars: per role G = 1.0, 1.0, 0.5, 0.5 -> mean 0.75 -> +-0.25 (std 0.25)
    ("mars", {}, [0.25, 0.25, -0.25, -0.25] * 2),
    ("mars", {"normalize_std": True}, [s * 0.25 / (0.25 + EPS) for s in (1, 1, -1, -1)] * 2),
    ("mars_shared", {}, [0.25, 0.25, -0.25, -0.25] * 2),
    # zero variance: r1 = 0, then every whitening is 0 / (0 + eps) = 0
    ("mars_code", {}, [0.0] * 8),
    ("grpo_trajectory", {}, [0.0] * 8),  # every R = 1.0, std 0
    ("rloo_env", {}, [0.0] * 8),
    ("rae", {}, [1.0] * 8),
])
def test_all_rewards_equal(name, options, expected):
    adv = compute_advantages(all_equal_rewards(), name, **options)["advantage"].to_numpy()
    assert np.isfinite(adv).all()
    np.testing.assert_allclose(adv, expected, rtol=1e-9, atol=1e-12)


def test_normalize_std_with_zero_variance_gives_zero():
    df = frame([(f"e{i}", "g", "player_0", 0, 0.5) for i in range(3)])
    adv = mars_turn_level(df, normalize_std=True)["advantage"].to_list()
    assert adv == [0.0, 0.0, 0.0]


# ------------------------------------------------------------------------------ RAE


def rae_batch_two() -> pl.DataFrame:
    # tic_tac_toe: player_0 R = 0.05 + 1.05 = 1.1, player_1 R = 0.05 - 0.95 = -0.9;
    # kuhn_poker player_0 R = 2.0 (a new group)
    return frame([
        ("e3", "tic_tac_toe", "player_0", 0, 0.05),
        ("e3", "tic_tac_toe", "player_1", 1, 0.05),
        ("e3", "tic_tac_toe", "player_0", 2, 1.05),
        ("e3", "tic_tac_toe", "player_1", 3, -0.95),
        ("k1", "kuhn_poker", "player_0", 0, 2.0),
    ])




def test_rae_two_batches_by_hand():
    # batch 1 (tic_tac_toe()): every baseline starts at 0 and is read before any update, so
    # A = R: player_0 e1 1.15, e2 -0.85; player_1 e1 -0.90, e2 1.15
    batch1 = tic_tac_toe()
    adv1 = rae(batch1)["advantage"].to_list()
    assert adv1 == pytest.approx(
        [1.15, -0.90, 1.15, -0.90, 1.15, -0.85, 1.15, -0.85, 1.15, -0.85, 1.15], abs=1e-12)
    # update: player_0 mean R (1.15 - 0.85) / 2 = 0.15 -> 0.05 * 0.15 = 0.0075
    #         player_1 mean R (-0.90 + 1.15) / 2 = 0.125 -> 0.00625 (each trajectory once: the
    #         per-turn mean (2 * -0.9 + 3 * 1.15) / 5 would give 0.0165)
    state1 = rae_update({}, batch1)
    assert state1 == pytest.approx({P0: 0.0075, P1: 0.00625}, abs=1e-12)
    # batch 2 reads state1: 1.1 - 0.0075 = 1.0925; -0.9 - 0.00625 = -0.90625; kuhn 2.0 - 0
    adv2 = rae(rae_batch_two(), state1)["advantage"].to_list()
    assert adv2 == pytest.approx([1.0925, -0.90625, 1.0925, -0.90625, 2.0], abs=1e-12)
    # update: 0.95 * 0.0075 + 0.05 * 1.1 = 0.062125; 0.95 * 0.00625 - 0.05 * 0.9 = -0.0390625;
    # kuhn 0.05 * 2.0 = 0.1; a group absent from the batch keeps its value
    state2 = rae_update({**state1, "connect_four|player_0": 0.5}, rae_batch_two())
    assert state2 == pytest.approx(
        {P0: 0.062125, P1: -0.0390625, KUHN: 0.1, "connect_four|player_0": 0.5}, abs=1e-12)
    assert list(state2) == sorted(state2)


def test_rae_update_decay_and_group_keys():
    # decay 0.5, key (game,): trajectories 1.15, -0.90, -0.85, 1.15 -> mean 0.1375;
    # b = 0.5 * 1.0 + 0.5 * 0.1375
    state = rae_update({"tic_tac_toe": 1.0}, tic_tac_toe(), group_keys=("game",), decay=0.5)
    assert state == pytest.approx({"tic_tac_toe": 0.56875}, abs=1e-12)
    adv = rae(tic_tac_toe(), state, group_keys=("game",))["advantage"].to_list()
    assert adv[0] == pytest.approx(1.15 - 0.56875, abs=1e-12)


def test_rae_update_does_not_mutate_and_survives_json():
    state = {P0: 0.25, "connect_four|player_1": -1.5}
    before = dict(state)
    new = rae_update(state, tic_tac_toe())
    assert state == before and new is not state
    restored = json.loads(json.dumps(new))
    assert restored == new
    assert rae(rae_batch_two(), restored).equals(rae(rae_batch_two(), new))
    assert rae_update(restored, rae_batch_two()) == rae_update(new, rae_batch_two())


def test_rae_key():
    assert rae_key(("tic_tac_toe", "player_0")) == "tic_tac_toe|player_0"
    assert rae_key(["kuhn_poker"]) == "kuhn_poker"


@pytest.mark.parametrize("baselines", [[1.0], {"a": "x"}, {"a": float("nan")}, {1: 0.5}])
def test_rae_rejects_bad_baselines(baselines):
    with pytest.raises(ValueError, match="rae baselines"):
        rae(tic_tac_toe(), baselines)
    with pytest.raises(ValueError, match="rae baselines"):
        rae_update(baselines, tic_tac_toe())


@pytest.mark.parametrize("decay", [-0.1, 1.5, "0.9"])
def test_rae_update_rejects_bad_decay(decay):
    with pytest.raises(ValueError, match="decay"):
        rae_update({}, tic_tac_toe(), decay=decay)


# ------------------------------------------------------------------------------ RLOO


def test_rloo_env_by_hand():
    # one game, 11 steps, sum 0.55: A = r - (0.55 - r) / 10 = 1.1 r - 0.055
    # -> 0.05: 0.0, -0.95: -1.1, 1.05: 1.1 (step rewards, not returns)
    out = rloo_env(tic_tac_toe())
    expected = [0.0, 0.0, 0.0, -1.1, 1.1, 0.0, 0.0, 0.0, 0.0, -1.1, 1.1]
    np.testing.assert_allclose(out["advantage"].to_numpy(), expected, atol=1e-12)


def test_rloo_env_size_one_group_and_custom_keys():
    # scale_table + the solo game: the solo row is alone -> 0; per (game, role) the two rows
    # of each role are each other's baseline
    df = pl.concat([scale_table(), ONE_ROW])
    assert rloo_env(df)["advantage"].to_list()[-1] == 0.0
    out = rloo_env(df, group_keys=("game", "role"))["advantage"].to_list()
    assert out == pytest.approx([-20.0, 2.0, 20.0, -2.0, 0.0], abs=1e-12)
