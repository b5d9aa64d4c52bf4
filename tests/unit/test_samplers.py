"""Samplers: environment (round-robin / weights), opponent (self, bots, frozen, curriculum),
position (rotate / random); the rollout task's frozen-checkpoint pool and opponent metrics."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from mars_core.config import ConfigError, load_config
from mars_core.rollout.samplers import apportion, game_schedule, interleave, plan_episodes
from mars_core.vocab import FROZEN


def test_apportion_largest_remainder_and_total():
    rng = random.Random(0)
    assert apportion([("a", 1), ("b", 2)], 6, rng) == {"a": 2, "b": 4}
    counts = apportion([("a", 1), ("b", 1), ("c", 1)], 4, rng)
    assert sum(counts.values()) == 4 and sorted(counts.values()) == [1, 1, 2]
    assert apportion([("a", 1), ("b", 0)], 3, rng) == {"a": 3, "b": 0}
    with pytest.raises(ValueError, match="sum to 0"):
        apportion([("a", 0)], 3, rng)


def test_apportion_ties_vary_with_the_seed():
    winners = {max(apportion([("a", 1), ("b", 1)], 1, random.Random(s)).items(),
                   key=lambda kv: kv[1])[0] for s in range(20)}
    assert winners == {"a", "b"}


def test_interleave_deals_round_robin():
    assert interleave({"a": 3, "b": 1}, ["a", "b"]) == ["a", "b", "a", "a"]


def test_game_schedule_round_robin_and_weights():
    rng = random.Random(0)
    assert game_schedule(["x", "y"], 4, {}, rng) == ["x", "y", "x", "y"]
    got = game_schedule(["x", "y"], 9, {"x": 2.0}, rng)  # y is not named: weight 1
    assert Counter(got) == {"x": 6, "y": 3}


def test_self_play_takes_every_seat_and_ids_are_unique():
    specs = plan_episodes(["tic_tac_toe", "kuhn_poker"], 4, 3, 100)
    assert [s.game for s in specs] == ["tic_tac_toe", "kuhn_poker"] * 2
    assert all(s.agents == ("policy", "policy") for s in specs)
    assert len({s.episode_id for s in specs}) == 4 and specs[0].episode_id == "it0003-tic_tac_toe-0000"
    assert [s.seed for s in specs] == [100, 101, 102, 103]


def test_fixed_opponent_rotates_the_policy_seat():
    specs = plan_episodes(["three_player_ipd"], 6, 0, 0,
                          pools={"three_player_ipd": [("bot:tit-for-tat", 1.0)]})
    seats = [s.agents.index("policy") for s in specs]
    assert seats == [0, 1, 2, 0, 1, 2]
    assert all(s.agents.count("bot:tit-for-tat") == 2 for s in specs)


def test_random_position_is_uniform_over_seats():
    specs = plan_episodes(["three_player_ipd"], 600, 0, 0, position="random",
                          pools={"three_player_ipd": [("bot:random", 1.0)]})
    counts = Counter(s.agents.index("policy") for s in specs)
    assert set(counts) == {0, 1, 2} and min(counts.values()) > 150


def test_curriculum_pool_weights_hold_every_iteration():
    pool = [("bot:random", 1.0), ("bot:mcts-10", 2.0), ("self", 1.0)]
    specs = plan_episodes(["tic_tac_toe"], 8, 5, 0, pools={"tic_tac_toe": pool})
    kinds = Counter("self" if s.agents == ("policy", "policy") else
                    next(a for a in s.agents if a != "policy") for s in specs)
    assert kinds == {"bot:random": 2, "bot:mcts-10": 4, "self": 2}


def test_plans_are_deterministic_per_seed_and_iteration():
    pool = {"tic_tac_toe": [("bot:random", 1.0), ("bot:mcts-10", 1.0)]}
    a = plan_episodes(["tic_tac_toe"], 5, 1, 7, pools=pool, position="random")
    assert a == plan_episodes(["tic_tac_toe"], 5, 1, 7, pools=pool, position="random")
    others = [plan_episodes(["tic_tac_toe"], 5, 1, s, pools=pool, position="random") for s in range(8)]
    assert any([x.agents for x in o] != [x.agents for x in a] for o in others)


def _cfg(*items):
    return load_config(None, ["rollout.games=[tic_tac_toe, colonel_blotto]", *items])


def test_config_curriculum_unlocks_and_keeps_earlier_opponents():
    cfg = _cfg("rollout.opponents={tic_tac_toe: [{opponent: bot:random}, "
               "{opponent: bot:mcts-10, unlock_at: 3, weight: 2}, {opponent: frozen, unlock_at: 5}]}")
    assert cfg.rollout.opponent_pool("tic_tac_toe", 0) == [("bot:random", 1.0)]
    assert cfg.rollout.opponent_pool("tic_tac_toe", 4) == [("bot:random", 1.0), ("bot:mcts-10", 2.0)]
    assert [o for o, _ in cfg.rollout.opponent_pool("tic_tac_toe", 9)] == ["bot:random", "bot:mcts-10", FROZEN]
    assert cfg.rollout.opponent_pool("colonel_blotto", 9) == [("self", 1.0)]


@pytest.mark.parametrize("item, message", [
    ("rollout.opponents={tic_tac_toe: [{opponent: bot:random, unlock_at: 2}]}", "must unlock at 0"),
    ("rollout.opponents={tic_tac_toe: []}", "curriculum is empty"),
    ("rollout.opponents={tic_tac_toe: [{opponent: bot:tit-for-tat}]}", "does not fit tic_tac_toe"),
    ("rollout.opponents={tic_tac_toe: [{opponent: bot:random, weight: 0}]}", "weight"),
    ("rollout.game_weights={connect_four: 1}", "not in rollout.games"),
    ("rollout.game_weights={tic_tac_toe: 0, colonel_blotto: 0}", "every weight is 0"),
    ("rollout.position=left", "position"),
])
def test_bad_sampler_configs_are_refused_in_one_line(item, message):
    with pytest.raises(ConfigError, match=message) as err:
        _cfg(item)
    assert "\n" not in str(err.value)


def test_weights_lift_the_multiple_of_games_rule():
    with pytest.raises(ConfigError, match="multiple of the number of games"):
        _cfg("rollout.episodes_per_iteration=5")
    assert _cfg("rollout.episodes_per_iteration=5", "rollout.game_weights={tic_tac_toe: 2}")


def test_frozen_pool_and_opponent_metrics(tmp_path):
    from mars_core.types import Episode
    from mars_core.run.commit import write_json
    from tasks.policies import frozen_snapshots
    from mars_core.run.layout import INIT, POLICY_FILE, PREPARE_POLICY, checkpoint_dir, stage_dir
    from tasks.rollout import opponent_metrics

    init = stage_dir(tmp_path, INIT, PREPARE_POLICY)
    init.mkdir(parents=True)
    write_json(init / POLICY_FILE, {"path": "/models/start"})
    for j in range(3):
        checkpoint_dir(tmp_path, j).mkdir(parents=True)
    (checkpoint_dir(tmp_path, 0) / "model.safetensors").write_text("x")
    (checkpoint_dir(tmp_path, 2) / "model.safetensors").write_text("x")
    # iteration 3 plays checkpoint 2: frozen opponents are the start and kept checkpoints < 2
    assert frozen_snapshots(tmp_path, 3) == {"start": "/models/start",
                                            "iter_0000": str(checkpoint_dir(tmp_path, 0))}
    assert frozen_snapshots(tmp_path, 0) == {"start": "/models/start"}

    def ep(agents, outcomes):
        return Episode("e", "tic_tac_toe", 0, agents, (0.0, 0.0), outcomes, -1, "", "", ())

    m = opponent_metrics([ep(("policy", "bot:random"), ("win", "loss")),
                          ep(("bot:random", "policy"), ("win", "loss")),
                          ep(("frozen:iter_0000", "policy"), ("loss", "win")),
                          ep(("policy", "policy"), ("win", "loss"))])
    assert m == {"opponents/tic_tac_toe/bot:random/episodes": 2.0,
                 "opponents/tic_tac_toe/bot:random/win_rate": 0.5,
                 "opponents/tic_tac_toe/frozen/episodes": 1.0,
                 "opponents/tic_tac_toe/frozen/win_rate": 1.0}
