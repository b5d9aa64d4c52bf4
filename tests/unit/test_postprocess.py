"""The post-episode pipeline's shared parts and the OpenSpiel (MARS) games. The builders here
(`make_episode`, `run`) are shared by the per-game test files."""
import copy
import json
from dataclasses import replace

import polars as pl
import pytest

from mars_core import postprocess as pp
from mars_core.postprocess import rewards as mars_rewards
from mars_core.config import OUTCOMES, In2AIRewards, RewardsConfig
from mars_core.games.registry import GAMES
from mars_core.postprocess.common import apply_gates, player_outcome, shape
from mars_core.types import Episode, Turn

CFG = RewardsConfig()
C = CFG.in2ai


def make_episode(game, steps, outcomes, final=None, *, agents=None, returns=None, roles=None):
    """An episode from `steps`: `(player, facts dict | None | error type)`; an error type as the
    last step makes it the rule error that ended the game."""
    turns = []
    for i, (player, fact) in enumerate(steps):
        error = fact if isinstance(fact, str) else ""
        turns.append(Turn(
            episode_id="e", game=game, turn=i, player=player,
            role=(roles or {}).get(player, f"player_{player}"),
            agent=(agents or ("policy",) * len(outcomes))[player], observation="",
            action="" if error else "a", valid=not error, error=error,
            info=json.dumps(fact) if isinstance(fact, dict) else ""))
    error_player = turns[-1].player if turns and turns[-1].error else -1
    return Episode("e", game, 0, tuple(agents or ("policy",) * len(outcomes)),
                   tuple(returns or (0.0,) * len(outcomes)), tuple(outcomes), error_player,
                   turns[-1].error if error_player >= 0 else "",
                   json.dumps(final) if final else "", tuple(turns))


def run(episode, cfg=CFG):
    """The three stages in order; checks that none of them changed its input."""
    before = copy.deepcopy(episode)
    players = pp.build_players(episode, cfg)
    filtered = pp.filter_steps(episode, players, cfg)
    filtered_before = copy.deepcopy(filtered)
    out = pp.assign_rewards(filtered, players, cfg)
    assert episode == before and filtered == filtered_before
    return players, out


def rewards(episode):
    return [round(t.reward, 6) for t in episode.turns]


def gates(episode):
    return [t.gate_reason for t in episode.turns]


# -- shared helpers -----------------------------------------------------------------------
@pytest.mark.parametrize("raw, error, expected", [
    ("win", "", "win"), ("draw", "", "draw"), ("loss", "", "loss"),
    ("invalid", "parsing_failure", "parsing_failure"),
    ("invalid", "invalid_action", "invalid_action"),
    ("other_invalid", "invalid_action", "other_player_invalid_action"),
])
def test_outcome_mapping(raw, error, expected):
    ep = Episode("e", "tic_tac_toe", 0, ("policy",), (0.0,), (raw,), error=error)
    assert player_outcome(ep, 0) == expected and expected in OUTCOMES


def test_unknown_outcome_raises():
    with pytest.raises(ValueError, match="unknown outcome"):
        player_outcome(Episode("e", "tic_tac_toe", 0, ("policy",), (0.0,), ("won",)), 0)


@pytest.mark.parametrize("value, outcome, expected", [
    (1.0, "win", 1.0), (1.0, "draw", 0.6), (1.0, "loss", 0.3), (0.5, "invalid_action", 0.15),
    (1.0, "other_player_invalid_action", 0.6), (-0.5, "win", -0.5), (-0.5, "loss", -0.5),
    (3.0, "win", 1.0), (-3.0, "win", -0.8), (0.0, "loss", 0.0),
])
def test_multiplier_then_clip(value, outcome, expected):
    assert shape(value, outcome, C) == pytest.approx(expected)


@pytest.mark.parametrize("value", [-100.0, -0.8, -0.1, 0.0, 0.3, 5.0])
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_floors_below_any_shaped_reward(value, outcome):
    assert C.parsing_failure <= C.invalid_action < shape(value, outcome, C)


def test_custom_clip_and_multipliers():
    c = In2AIRewards(clip=0.5, shaped_min=-0.4, parsing_failure=-0.5, invalid_action=-0.45,
                     outcome_multiplier=dict.fromkeys(OUTCOMES, 2.0))
    assert [shape(v, "loss", c) for v in (0.2, 0.3, -0.3, -0.6)] == pytest.approx(
        [0.4, 0.5, -0.3, -0.4])


def test_not_trainable_takes_precedence_and_error_steps_stay():
    ep = make_episode("colonel_blotto", [(0, {}), (1, {}), (0, {}), (1, "invalid_action")],
                      ("other_invalid", "invalid"), agents=("policy", "bot:random"))
    players = [pp.PlayerResult("e", "colonel_blotto", p, "r", "t", a, a == "policy", "win",
                               False, 0.0) for p, a in enumerate(ep.agents)]
    out = apply_gates(ep, players, dict.fromkeys(range(4), pp.UNFINISHED_UNIT))
    assert gates(out) == ["unfinished_unit", "not_trainable", "unfinished_unit", "not_trainable"]
    with pytest.raises(ValueError, match="do not belong"):
        apply_gates(ep, players[:1], {})


# -- dispatcher, frames, counts -----------------------------------------------------------
def test_pipelines_cover_every_game_and_unknown_games_fail():
    assert set(pp.PIPELINES) == set(GAMES)
    assert pp.PIPELINES["kuhn_poker"] is pp.mars
    ep = Episode("e", "chess", 0, ("policy",), (0.0,), ("win",))
    for call in (lambda: pp.build_players(ep, CFG), lambda: pp.filter_steps(ep, (), CFG),
                 lambda: pp.assign_rewards(ep, (), CFG)):
        with pytest.raises(ValueError, match="chess.*tic_tac_toe.*secret_mafia"):
            call()


def test_gate_counts_count_every_gated_turn():
    def ep(reasons):
        return Episode("e", "g", 0, (), (), (), turns=tuple(
            Turn("e", "g", i, 0, "r", "policy", "", eligible=not r, gate_reason=r)
            for i, r in enumerate(reasons)))
    counts = pp.gate_counts([ep(["", "not_trainable", "unfinished_unit"]),
                             ep(["unfinished_unit", "outcome_unobserved"])])
    assert counts == {"not_trainable": 1, "depends_on_invalid_step": 0, "unfinished_unit": 2,
                      "outcome_unobserved": 1}
    assert tuple(counts) == pp.GATE_REASONS


def test_players_frame_one_row_per_player():
    ep = make_episode("tic_tac_toe", [(0, None), (1, None)], ("win", "loss"),
                      returns=(1.0, -1.0), roles={0: "x", 1: "o"})
    frame = pp.players_frame(pp.build_players(ep, CFG))
    assert frame.schema == pl.Schema(pp.PLAYER_SCHEMA)
    assert frame.select("role", "outcome", "episode_reward").rows() == [
        ("x", "win", 1.0), ("o", "loss", -1.0)]


# -- OpenSpiel games: MARS rewards --------------------------------------------------------
def _tic_tac_toe(agents=("policy", "policy"), error=None):
    steps = [(i % 2, None) for i in range(5)]
    if error:
        steps.append((1, error))
        outcomes, returns = ("other_invalid", "invalid"), (0.0, -1.0)
    else:
        outcomes, returns = ("win", "loss"), (1.0, -1.0)
    ep = make_episode("tic_tac_toe", steps, outcomes, agents=agents, returns=returns)
    return replace(ep, turns=tuple(
        replace(t, game_reward=r, completion_ids=tuple(range(3)))
        for t, r in zip(ep.turns, (0, 0, 0, 0, 1.0, -1.0))))


@pytest.mark.parametrize("error", [None, "invalid_action", "parsing_failure"])
def test_openspiel_gets_exactly_the_mars_rewards(error):
    ep = _tic_tac_toe(error=error)
    players, out = run(ep)
    assert out == mars_rewards.mars_turn_rewards(pp.filter_steps(ep, players, CFG), CFG)
    assert all(t.eligible for t in out.turns)
    assert [p.episode_reward for p in players] == list(ep.returns)


def test_openspiel_players_and_bot_gating():
    players, out = run(_tic_tac_toe(agents=("policy", "bot:mcts-10"), error="invalid_action"))
    assert [(p.role, p.team, p.trainable, p.outcome, p.caused_end) for p in players] == [
        ("player_0", "player_0", True, "other_player_invalid_action", False),
        ("player_1", "player_1", False, "invalid_action", True)]
    assert gates(out) == ["", "not_trainable"] * 3


def test_hanabi_seats_share_one_team():
    ep = make_episode("mini_hanabi", [(0, None), (1, None)], ("draw", "draw"),
                      returns=(2.0, 2.0))
    players, _ = run(ep)
    assert [(p.team, p.episode_reward) for p in players] == [("team", 2.0), ("team", 2.0)]


def test_stages_return_new_records_and_keep_their_input():
    ep = _tic_tac_toe(agents=("policy", "bot:random"))
    players = pp.build_players(ep, CFG)
    filtered = pp.filter_steps(ep, players, CFG)
    rewarded = pp.assign_rewards(filtered, players, CFG)
    assert ep.turns[1].eligible and not filtered.turns[1].eligible
    assert [t.reward for t in filtered.turns] == [0.0] * 5
    assert rewarded.turns[1].gate_reason == "not_trainable" and rewarded.turns[1].reward != 0.0
