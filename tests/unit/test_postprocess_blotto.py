"""Colonel Blotto post-episode rules (SPEC section 5) on hand-built episodes."""
import pytest

from mars_core.config import RewardsConfig
from tests.unit.test_postprocess import C, gates, make_episode, rewards, run

ROLES = {0: "alpha", 1: "beta"}
ALLOC = {"A": 7, "B": 7, "C": 6}


def _round(r, result):
    return [(0, {"round": r, "allocation": ALLOC}),
            (1, {"round": r, "allocation": ALLOC, "round_result": result})]


def _final(won, played, needed=5):
    return {"rounds_won": won, "rounds_played": played, "rounds_needed": needed, "num_rounds": 9}


def _cut_off(error="invalid_action", agents=("policy", "policy")):
    """Rounds 1-3 resolved (seat 0: win, loss, tie); seat 1's round-4 reply breaks the rules."""
    steps = (_round(1, ["win", "loss"]) + _round(2, ["loss", "win"]) + _round(3, ["tie", "tie"])
             + [(0, {"round": 4, "allocation": ALLOC}), (1, error)])
    return make_episode("colonel_blotto", steps, ("other_invalid", "invalid"),
                        _final([1, 1], 3), agents=agents, roles=ROLES)


def test_opponents_invalid_move_gates_the_last_step_only():
    players, out = run(_cut_off())
    assert gates(out) == [""] * 6 + ["depends_on_invalid_step", ""]
    m_other, m_offender = (C.outcome_multiplier[o] for o in
                           ("other_player_invalid_action", "invalid_action"))
    assert rewards(out) == pytest.approx([
        C.blotto_round_win * m_other, C.blotto_round_loss, C.blotto_round_loss,
        C.blotto_round_win * m_offender, 0.0, 0.0, 0.0, C.invalid_action])
    last = out.turns[-1]
    assert (last.eligible, last.game_reward, last.format_reward) == (True, 0.0, C.invalid_action)
    assert [(p.outcome, p.caused_end) for p in players] == [
        ("other_player_invalid_action", False), ("invalid_action", True)]


def test_parsing_failure_gets_its_own_floor():
    _, out = run(_cut_off("parsing_failure"))
    assert out.turns[-1].reward == C.parsing_failure < C.invalid_action


def test_bot_seat_is_not_trainable_even_its_error_step():
    _, out = run(_cut_off(agents=("policy", "bot:random")))
    assert gates(out) == ["", "not_trainable"] * 3 + ["depends_on_invalid_step", "not_trainable"]


@pytest.mark.parametrize("outcome", ["win", "draw", "loss"])
def test_outcome_multiplier_scales_only_positive_rewards(outcome):
    ep = make_episode("colonel_blotto", _round(1, ["win", "loss"]), (outcome, outcome),
                      _final([1, 0], 1), roles=ROLES)
    _, out = run(ep)
    won = C.blotto_round_win * C.outcome_multiplier[outcome]
    assert rewards(out) == pytest.approx([won, C.blotto_round_loss])


@pytest.mark.parametrize("won, needed, graded", [
    ([5, 4], 5, [1.0, 0.8]), ([3, 1], 5, [0.6, 0.2]), ([0, 0], 5, [0.0, 0.0]),
    ([6, 2], 5, [1.0, 0.4]),
])
def test_graded_episode_reward(won, needed, graded):
    ep = make_episode("colonel_blotto", _round(1, ["tie", "tie"]), ("win", "loss"),
                      _final(won, 9, needed), roles=ROLES)
    players, _ = run(ep)
    assert [p.episode_reward for p in players] == pytest.approx(graded)
    assert [(p.role, p.team) for p in players] == [("alpha", "alpha"), ("beta", "beta")]


def test_round_values_are_clipped():
    cfg = RewardsConfig(in2ai={"blotto_round_win": 3.0, "blotto_round_loss": -2.0})
    ep = make_episode("colonel_blotto", _round(1, ["win", "loss"]), ("win", "loss"),
                      _final([1, 0], 1), roles=ROLES)
    _, out = run(ep, cfg)
    assert rewards(out) == [1.0, -0.8]


def test_unresolved_round_without_an_error_is_unfinished():
    steps = _round(1, ["win", "loss"]) + [(0, {"round": 2, "allocation": ALLOC})]
    ep = make_episode("colonel_blotto", steps, ("draw", "draw"), _final([1, 0], 1), roles=ROLES)
    _, out = run(ep)
    assert gates(out) == ["", "", "unfinished_unit"]
