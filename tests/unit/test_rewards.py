from dataclasses import replace

import pytest

from mars_core.config import RewardsConfig
from mars_core.postprocess.rewards import length_penalty, mars_turn_rewards
from mars_core.types import Episode, Turn


def _turn(i, player, game_reward=0.0, valid=True, n_tokens=5):
    return Turn(episode_id="e", game="tic_tac_toe", turn=i, player=player, role=f"player_{player}",
                agent="policy", observation="", completion_ids=tuple(range(n_tokens)),
                valid=valid, error="" if valid else "invalid_action", game_reward=game_reward)


def _episode(turns, outcomes, returns):
    return Episode("e", "tic_tac_toe", 0, ("policy", "policy"), returns, outcomes, turns=tuple(turns))


def test_length_penalty_values():
    assert length_penalty(2048, 0.5, 11, 2048) == 0.0
    assert length_penalty(100, 0.5, 11, 2048) == 0.0
    assert length_penalty(4096, 0.5, 11, 2048) == pytest.approx(-0.5 * 2048 / 2037)


def test_win_loss_rewards():
    turns = [_turn(0, 0), _turn(1, 1), _turn(2, 0, game_reward=1.0), _turn(3, 1, game_reward=-1.0)]
    ep = mars_turn_rewards(_episode(turns, ("win", "loss"), (1.0, -1.0)), RewardsConfig())
    assert [t.reward for t in ep.turns] == pytest.approx([0.05, 0.05, 1.05, -0.95])
    assert [t.format_reward for t in ep.turns] == pytest.approx([0.05] * 4)


def test_draw_bonus_on_each_players_last_turn_only():
    turns = [_turn(i, i % 2) for i in range(9)]
    ep = mars_turn_rewards(_episode(turns, ("draw", "draw"), (0.0, 0.0)), RewardsConfig())
    game = [t.game_reward for t in ep.turns]
    assert game == pytest.approx([0, 0, 0, 0, 0, 0, 0, 0.1, 0.1])


def test_invalid_reply_penalty_and_scale():
    turns = [_turn(0, 0), _turn(1, 1, game_reward=-1.0, valid=False)]
    cfg = RewardsConfig(game_scale={"tic_tac_toe": 2.0})
    ep = mars_turn_rewards(_episode(turns, ("other_invalid", "invalid"), (0.0, -1.0)), cfg)
    assert ep.turns[0].reward == pytest.approx(0.05)
    assert ep.turns[1].reward == pytest.approx(-10 - 2.0)


def test_long_reply_penalised():
    turns = [replace(_turn(0, 0), completion_ids=tuple(range(4096)))]
    ep = mars_turn_rewards(_episode(turns, ("draw", "draw"), (0.0, 0.0)), RewardsConfig())
    assert ep.turns[0].length_reward == pytest.approx(-0.5 * 2048 / 2037)
