"""Advantage estimators: hand-computed tables, loop-vs-vectorised agreement, error messages."""
from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from mars_core.advantages import (
    ESTIMATORS,
    compute_advantages,
    grpo_trajectory,
    mars_code,
    mars_shared,
    mars_turn_level,
    rae,
    rae_key,
    rae_update,
    rloo_env,
)
from mars_core.advantages_reference import (
    grpo_trajectory_reference,
    mars_code_reference,
    mars_turn_level_reference,
    rae_reference,
    rae_update_reference,
    rloo_env_reference,
)

COLUMNS = ["episode_id", "game", "player", "role", "turn", "reward"]
EPS = 1e-6


def frame(rows: list[tuple]) -> pl.DataFrame:
    """Rows of (episode_id, game, role, turn, reward), each role held by one seat: `player` is
    the role's index among the sorted roles."""
    roles = sorted({r[2] for r in rows})
    return pl.DataFrame([(e, g, roles.index(r), r, t, w) for e, g, r, t, w in rows],
                        schema=COLUMNS, orient="row")


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


def random_turns(seed: int, n_episodes: int = 12, ties: bool = False) -> pl.DataFrame:
    """A random batch: 2 games, 2 roles, 1-7 moves per episode, non-contiguous turns within a
    trajectory, rows shuffled, plus an extra unique column `note` that must survive. `ties`:
    rewards in {-1, 0, 1}, so many returns-to-go coincide (mars_code's distinct values)."""
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(n_episodes):
        game = ["tic_tac_toe", "kuhn_poker"][int(rng.integers(2))]
        for t in range(int(rng.integers(1, 8))):
            role = f"player_{int(rng.integers(2))}"
            reward = float(rng.integers(-1, 2)) if ties else float(np.round(rng.normal(), 3))
            rows.append((f"ep{e}", game, role, t, reward))
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


P0, P1, KUHN = "tic_tac_toe|player_0", "tic_tac_toe|player_1", "kuhn_poker|player_0"


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
    assert list(ESTIMATORS) == NAMES
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
                              "mars, mars_code, grpo_trajectory, mars_shared, rae, rloo_env")


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
