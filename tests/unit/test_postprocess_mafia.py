"""Secret Mafia post-episode rules (SPEC section 5) on hand-built episodes."""
import pytest

from mars_core import postprocess as pp
from mars_core.config import RewardsConfig
from tests.unit.test_postprocess import C, gates, make_episode, rewards, run

TEAMS = ["Mafia", "Mafia", "Village", "Village", "Village", "Village"]
ROLES = ["Mafia", "Mafia", "Doctor", "Detective", "Villager", "Villager"]


def step(player, phase, target=None):
    return player, {"phase": phase, "day": 1, "target": target,
                    "target_team": None if target is None else TEAMS[target]}


def _episode(steps, outcomes, winner, agents=None):
    final = {"roles": ROLES, "teams": TEAMS, "winner": winner, "alive": [True] * 6}
    return make_episode("secret_mafia", steps, outcomes, final, agents=agents)


VILLAGE_WINS = ("loss", "loss", "win", "win", "win", "win")


@pytest.mark.parametrize("s, expected", [
    (step(4, "Day-Discussion"), C.mafia_win),
    (step(0, "Day-Discussion"), C.mafia_loss),
    (step(3, "Day-Voting", 4), C.mafia_win + C.mafia_vote_miss),
    (step(2, "Day-Voting", 0), min(C.clip, C.mafia_win + C.mafia_vote_hit)),
    (step(0, "Night-Mafia", 2), C.mafia_loss + C.mafia_vote_hit),
    (step(1, "Day-Voting", 0), C.mafia_loss + C.mafia_vote_miss),
    (step(2, "Night-Doctor", 3), C.mafia_win),
    (step(3, "Night-Detective", 0), C.mafia_win),
])
def test_team_result_plus_vote_bonus(s, expected):
    _, out = run(_episode([s], VILLAGE_WINS, "Village"))
    assert rewards(out) == pytest.approx([expected])
    assert out.turns[0].eligible


def test_positive_rewards_of_a_losing_team_are_scaled():
    cfg = RewardsConfig(in2ai={"mafia_loss": 0.2})
    mafia_wins = ("win",) * 2 + ("loss",) * 4
    _, out = run(_episode([step(4, "Day-Discussion"), step(0, "Night-Mafia", 2)], mafia_wins,
                          "Mafia"), cfg)
    assert rewards(out) == pytest.approx([0.2 * C.outcome_multiplier["loss"], C.clip])


def test_graded_reward_and_teams():
    players, _ = run(_episode([step(4, "Day-Discussion")], VILLAGE_WINS, "Village"))
    assert [p.episode_reward for p in players] == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert [p.team for p in players] == TEAMS


def test_rule_error_leaves_the_outcome_unobserved():
    steps = [step(2, "Day-Discussion"), step(0, "Day-Discussion"), step(3, "Day-Voting", 0),
             (4, "invalid_action")]
    outcomes = ("other_invalid",) * 4 + ("invalid", "other_invalid")
    players, out = run(_episode(steps, outcomes, None))
    assert gates(out) == ["outcome_unobserved"] * 3 + [""]
    assert out.turns[-1].reward == C.invalid_action and out.turns[-1].eligible
    assert [p.episode_reward for p in players] == [0.0] * 6
    assert pp.gate_counts([out])["outcome_unobserved"] == 3


def test_not_trainable_takes_precedence_over_unobserved():
    steps = [step(2, "Day-Discussion"), step(0, "Day-Discussion"), (0, "parsing_failure")]
    outcomes = ("invalid",) + ("other_invalid",) * 5
    _, out = run(_episode(steps, outcomes, None, agents=("bot:random",) + ("policy",) * 5))
    assert gates(out) == ["outcome_unobserved", "not_trainable", "not_trainable"]
    assert pp.gate_counts([out]) == {"not_trainable": 2, "depends_on_invalid_step": 0,
                                     "unfinished_unit": 0, "outcome_unobserved": 1}
