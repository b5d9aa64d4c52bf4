"""Three-player IPD post-episode rules (SPEC section 5) on hand-built episodes."""
import pytest

from tests.unit.test_postprocess import C, gates, make_episode, rewards, run

T = 5
GAIN = [3, 3, 10]  # seats 0 and 1 cooperate; seat 2 defects against both
DECISIONS = {"0": {"1": "cooperate", "2": "cooperate"}, "1": {"0": "cooperate", "2": "cooperate"},
             "2": {"0": "defect", "1": "defect"}}


def chat(player, r):
    return player, {"round": r, "phase": "chat"}


def decide(player, r, gain=None):
    facts = {"round": r, "phase": "decision"}
    if gain:
        facts |= {"round_gain": gain, "decisions": DECISIONS}
    return player, facts


def _round(r, gain=GAIN):
    return [chat(0, r), chat(1, r), chat(2, r), decide(0, r), decide(1, r), decide(2, r, gain)]


def _episode(steps, outcomes, scores=(3, 3, 10), agents=None):
    final = {"scores": list(scores), "num_rounds": 5, "T": T, "rounds_played": 1}
    return make_episode("three_player_ipd", steps, outcomes, final, agents=agents)


def test_resolved_round_shares_the_normalised_gain():
    _, out = run(_episode(_round(1), ("loss", "loss", "win")))
    share = [g / (2 * T) for g in GAIN]
    mult = [C.outcome_multiplier["loss"]] * 2 + [1.0]
    expected = [share[p] * mult[p] for p in (0, 1, 2)] * 2
    assert rewards(out) == pytest.approx(expected)
    assert all(t.eligible for t in out.turns)


def test_round_cut_off_before_its_decision_is_unfinished():
    steps = _round(1) + [chat(0, 2), chat(1, 2), (2, "parsing_failure")]
    _, out = run(_episode(steps, ("other_invalid", "other_invalid", "invalid")))
    assert gates(out) == [""] * 6 + ["unfinished_unit"] * 2 + [""]
    assert rewards(out)[6:] == [0.0, 0.0, C.parsing_failure]


def test_invalid_decision_gates_its_own_chat_and_is_penalised():
    steps = _round(1) + [chat(0, 2), chat(1, 2), chat(2, 2), decide(0, 2), (1, "invalid_action")]
    _, out = run(_episode(steps, ("other_invalid", "invalid", "other_invalid")))
    assert gates(out)[6:] == ["unfinished_unit", "depends_on_invalid_step", "unfinished_unit",
                              "unfinished_unit", ""]
    assert out.turns[-1].reward == C.invalid_action and out.turns[-1].eligible
    assert all(t.eligible for t in out.turns[:6])


def test_first_invalid_decision_follows_all_chat():
    steps = [chat(0, 1), chat(1, 1), chat(2, 1), (0, "invalid_action")]
    _, out = run(_episode(steps, ("invalid", "other_invalid", "other_invalid")))
    assert gates(out) == ["depends_on_invalid_step", "unfinished_unit", "unfinished_unit", ""]


def test_episode_stopped_during_chat_without_error():
    _, out = run(_episode(_round(1) + [chat(0, 2), chat(1, 2)], ("draw",) * 3))
    assert gates(out) == [""] * 6 + ["unfinished_unit"] * 2


def test_graded_reward_and_teams():
    players, _ = run(_episode(_round(1), ("win", "draw", "loss"), scores=(30, 15, 0)))
    assert [p.episode_reward for p in players] == pytest.approx([0.6, 0.3, 0.0])
    assert [p.team for p in players] == ["player_0", "player_1", "player_2"]


def test_bot_seats_are_not_trainable():
    _, out = run(_episode(_round(1), ("loss", "loss", "win"),
                          agents=("bot:random", "policy", "bot:random")))
    assert gates(out) == ["not_trainable", "", "not_trainable"] * 2
