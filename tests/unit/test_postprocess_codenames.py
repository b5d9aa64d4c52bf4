"""Codenames post-episode rules (SPEC section 5) on hand-built episodes."""
import pytest

from mars_core.postprocess.codenames import ClueGroup, group_values
from tests.unit.test_postprocess import C, gates, make_episode, rewards, run

TEAMS = ["red", "red", "blue", "blue"]


def _final(found=None):
    return {"teams": TEAMS, "team_words": {"red": 9, "blue": 8},
            "found": found or {"red": 2, "blue": 1}}


def clue(player, number):
    return player, {"kind": "clue", "team": TEAMS[player], "word": "w", "number": number}


def guess(player, label):
    return player, {"kind": "guess", "team": TEAMS[player], "word": "w", "label": label}


def _episode(steps, outcomes=("win", "win", "loss", "loss"), agents=None, found=None):
    return make_episode("codenames", steps, outcomes, _final(found), agents=agents)


def test_assassin_poisons_its_clue_group():
    steps = [clue(0, 2), guess(1, "own"), guess(1, "own"), guess(1, "neutral"),
             clue(2, 2), guess(3, "own"), guess(3, "assassin")]
    _, out = run(_episode(steps))
    red = (2 * C.codenames_own + C.codenames_neutral) / 3
    blue = (C.codenames_own + C.codenames_assassin) / 2
    assert rewards(out) == pytest.approx(
        [1.0, red, red, red, max(C.codenames_assassin, C.shaped_min), blue, blue])
    assert out.turns[5].reward < C.codenames_own
    assert all(t.eligible for t in out.turns)


@pytest.mark.parametrize("number, labels, credit", [
    (2, ["own", "own", "neutral"], 1.0), (3, ["own", "opponent"], 1 / 3),
    (1, ["own", "own"], 1.0), (2, ["pass"], 0.0), (0, ["own"], 0.0), (2, [], 0.0),
    (2, ["own", "assassin"], C.codenames_assassin),
])
def test_clue_credit_is_correct_guesses_against_the_number(number, labels, credit):
    group = ClueGroup(0, "red", 0, number, list(range(1, len(labels) + 1)), labels)
    assert group_values(group, C)[0] == pytest.approx(credit)


def test_pass_shares_the_group_average():
    _, out = run(_episode([clue(0, 1), guess(1, "own"), (1, {"kind": "pass", "team": "red"})]))
    assert rewards(out)[1:] == pytest.approx([(C.codenames_own + C.codenames_pass) / 2] * 2)


@pytest.mark.parametrize("error", ["parsing_failure", "invalid_action"])
def test_invalid_guess_gates_its_group(error):
    steps = [clue(0, 1), guess(1, "own"), clue(2, 2), guess(3, "own"), (3, error)]
    outcomes = ("other_invalid", "other_invalid", "other_invalid", "invalid")
    _, out = run(_episode(steps, outcomes))
    assert gates(out) == ["", "", "depends_on_invalid_step", "depends_on_invalid_step", ""]
    floor = C.parsing_failure if error == "parsing_failure" else C.invalid_action
    assert out.turns[-1].reward == floor and out.turns[-1].eligible


def test_unparsable_guess_right_after_the_clue_gates_the_clue():
    _, out = run(_episode([clue(0, 2), (1, "parsing_failure")],
                          ("invalid", "invalid", "other_invalid", "other_invalid")))
    assert gates(out) == ["depends_on_invalid_step", ""]
    assert rewards(out) == [0.0, C.parsing_failure]


def test_invalid_clue_leaves_the_other_teams_group_alone():
    steps = [clue(0, 1), guess(1, "own"), guess(1, "neutral"), (2, "invalid_action")]
    _, out = run(_episode(steps, ("other_invalid", "other_invalid", "invalid", "other_invalid")))
    assert gates(out) == ["", "", "", ""]
    assert out.turns[-1].reward == C.invalid_action


def test_clue_without_guesses_is_unfinished():
    steps = [clue(0, 1), guess(1, "own"), guess(1, "opponent"), clue(2, 3)]
    _, out = run(_episode(steps, ("draw",) * 4))
    assert gates(out) == ["", "", "", "unfinished_unit"]


def test_graded_reward_is_shared_by_the_team():
    players, _ = run(_episode([clue(0, 1)], found={"red": 6, "blue": 2}))
    assert [p.episode_reward for p in players] == pytest.approx([6 / 9, 6 / 9, 0.25, 0.25])
    assert [p.team for p in players] == TEAMS


def test_bot_team_is_not_trainable():
    steps = [clue(0, 1), guess(1, "own"), clue(2, 1), guess(3, "neutral")]
    _, out = run(_episode(steps, agents=("policy", "policy", "bot:random", "bot:random")))
    assert gates(out) == ["", "", "not_trainable", "not_trainable"]
    assert rewards(out)[:2] == pytest.approx([1.0, 1.0])
