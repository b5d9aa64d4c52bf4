"""The Secret Mafia adapter: random-bot episodes, secret roles, the Action Validator per phase,
step and final facts, and the private random state."""
import json
import random
import re

import pytest

from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE, format_answer
from mars_core.games.mafia import SecretMafia
from mars_core.games.registry import make_game
from mars_core.rollout.play import EpisodeSpec, play_episodes
from mars_core.types import SamplingParams
from mars_core.rollout.validator import validate

SEEDS = range(12)
ANSWER = re.compile(r"<answer>(.*?)</answer>")


def episodes(seeds=SEEDS):
    specs = [EpisodeSpec(f"e{s}", "secret_mafia", s, ("bot:random",) * 6) for s in seeds]
    return play_episodes(specs, None, None, SamplingParams(), progress=False)


def play_until(adapter, seed, done=lambda a, s: False, limit=400):
    """A state stepped with random valid actions until `done(adapter, state)` (or the end)."""
    rng, state = random.Random(seed), adapter.new_state(seed)
    for _ in range(limit):
        if adapter.is_terminal(state) or done(adapter, state):
            return state
        verdict = adapter.check_action(state, adapter.random_action(state, rng))
        assert verdict.action is not None, verdict
        adapter.play(state, verdict.action)
    raise AssertionError("the episode did not finish")


def reach(phase, need_dead=False):
    """A live state in `phase` (with at least one dead player if `need_dead`)."""
    a = SecretMafia()
    for seed in range(100):
        s = play_until(a, seed, lambda a, s: a.phase(s) == phase
                       and (not need_dead or len(a.alive(s)) < a.num_players))
        if not a.is_terminal(s):
            return a, s
    raise AssertionError(f"no seed reaches {phase}")


def fingerprint(a, s):
    ta = a.ta(s)
    return (s.random_state, a.phase(s), a.current_player(s), repr(ta.game_state),
            repr(ta.observations), repr(s.memory), s.done)


@pytest.fixture(scope="module")
def eps():
    return episodes()


def test_registry_and_player_count():
    assert isinstance(make_game("secret_mafia"), SecretMafia)
    a = SecretMafia()
    assert a.num_players == 6 and a.role(2) == "player_2" and not a.perfect_information
    with pytest.raises(ValueError):
        SecretMafia(5)
    big = SecretMafia(8)
    state = play_until(big, 3)
    info = big.final_info(state)
    assert big.is_terminal(state) and len(info["roles"]) == 8 and info["roles"].count("Mafia") == 2


def test_random_episodes_finish_with_team_returns(eps):
    for ep in eps:
        assert not ep.error and all(t.valid for t in ep.turns)
        info = json.loads(ep.info)
        teams, alive, winner = info["teams"], info["alive"], info["winner"]
        assert sorted(info["roles"]) == sorted(["Mafia"] * 2 + ["Doctor", "Detective"]
                                               + ["Villager"] * 2)
        assert [t == "Mafia" for t in teams] == [r == "Mafia" for r in info["roles"]]
        assert list(ep.returns) == [1.0 if t == winner else -1.0 for t in teams]
        mafia_alive = sum(teams[p] == "Mafia" for p in alive)
        assert winner == ("Village" if mafia_alive == 0 else "Mafia")
        assert winner == "Village" or 2 * mafia_alive >= len(alive)
        assert ep.outcomes == tuple("win" if t == winner else "loss" for t in teams)
    assert {json.loads(ep.info)["winner"] for ep in eps} == {"Mafia", "Village"}


def test_turn_roles_are_the_secret_roles(eps):
    for ep in eps:
        roles = json.loads(ep.info)["roles"]
        assert all(t.role == roles[t.player].lower() for t in ep.turns)


def test_same_seed_same_episode_and_global_random_untouched(eps):
    random.seed(1234)
    outer = random.getstate()
    again = episodes()
    assert random.getstate() == outer
    for x, y in zip(eps, again):
        assert x.info == y.info and x.returns == y.returns
        assert [(t.player, t.action, t.info) for t in x.turns] == \
               [(t.player, t.action, t.info) for t in y.turns]
    assert len({ep.info for ep in eps}) > 1  # seeds draw different roles / games


def test_step_facts(eps):
    for ep in eps:
        teams, days = json.loads(ep.info)["teams"], []
        for t in ep.turns:
            info = json.loads(t.info)
            days.append(info["day"])
            if info["phase"] == "Day-Discussion":
                assert info["target"] is None and info["target_team"] is None
            else:
                assert t.action == f"[{info['target']}]"
                assert info["target_team"] == teams[info["target"]]
            if info["phase"] == "Night-Mafia":
                assert teams[t.player] == "Mafia" and info["target_team"] == "Village"
        assert days == sorted(days) and days[0] == 1
    assert max(json.loads(t.info)["day"] for ep in eps for t in ep.turns) > 1


CASES = {  # phase -> [(action, expected canonical, or the error type)]
    "Day-Voting": [("[{alive}]", "[{alive}]"), ("[Player {alive}]", "[{alive}]"),
                   ("[player{alive}]", "[{alive}]"), ("[{me}]", "[{me}]"),
                   ("[{dead}]", INVALID_ACTION), ("[99]", INVALID_ACTION),
                   ("I vote [{alive}]", PARSING_FAILURE), ("[{alive}].", PARSING_FAILURE),
                   ("[{alive}] [{alive}]", PARSING_FAILURE), ("[123]", PARSING_FAILURE),
                   ("{alive}", PARSING_FAILURE), ("", PARSING_FAILURE),
                   ("[Player {alive}", PARSING_FAILURE), ("[-1]", PARSING_FAILURE)],
    "Night-Mafia": [("[{villager}]", "[{villager}]"), ("[{mate}]", INVALID_ACTION),
                    ("[{me}]", INVALID_ACTION), ("[Player {villager}]", "[{villager}]")],
    "Night-Doctor": [("[{other}]", "[{other}]"), ("[{me}]", INVALID_ACTION)],
    "Night-Detective": [("[{other}]", "[{other}]"), ("[{me}]", INVALID_ACTION)],
    "Day-Discussion": [("  I trust [3].  ", "I trust [3]."), ("", PARSING_FAILURE),
                       (" \n\t ", PARSING_FAILURE), ("x" * 1000, "x" * 1000),
                       ("x" * 1001, INVALID_ACTION)],
}


def names(a, s):
    me, alive = a.current_player(s), a.alive(s)
    mafia = [p for p in range(a.num_players) if a.team(s, p) == "Mafia"]
    return {"me": me, "alive": next(p for p in alive if p != me),
            "dead": next((p for p in range(a.num_players) if p not in alive), 0),
            "other": next(p for p in alive if p != me),
            "villager": next(p for p in alive if p not in mafia),
            "mate": next((p for p in mafia if p != me), me)}


@pytest.mark.parametrize("phase", list(CASES))
def test_validator_table(phase):
    a, s = reach(phase, need_dead=phase == "Day-Voting")
    n = names(a, s)
    if phase == "Night-Mafia":
        assert n["mate"] != n["me"] and n["mate"] in a.alive(s)
    before = fingerprint(a, s)
    for text, want in CASES[phase]:
        got = a.check_action(s, text.format(**n))
        if want in (INVALID_ACTION, PARSING_FAILURE):
            assert got.action is None and got.error == want and got.detail, (text, got)
        else:
            assert got.action == want.format(**n) and not got.error, (text, got)
    assert fingerprint(a, s) == before


@pytest.mark.parametrize("phase", list(CASES))
def test_instruction_lists_targets_with_a_valid_example(phase):
    a, s = reach(phase)
    me = a.current_player(s)
    text = a.instruction(s, me)
    example = ANSWER.findall(text)[-1]
    assert a.check_action(s, example).action == example
    for t in a.valid_targets(s, me):
        assert f"[{t}]" in text
    for example in ANSWER.findall(a.action_help):  # valid-looking: no parsing failure
        if (phase == "Day-Discussion") == (not example.startswith("[")):
            assert validate(a, s, format_answer(example)).error != PARSING_FAILURE


def test_validator_never_raises_and_never_changes_the_state():
    nasty = ["[" * 5000 + "3" + "]" * 5000, "9" * 100_000, "[Player " + "9" * 500 + "]",
             "\x00\x1b[31m[2]", "[２]", "[٣]", "[1][2]", "[[3]]", "<answer>[1]</answer>",
             "x" * 3_000_000, "[Player 3] and [Player 4]", "\u202e[1]", "[ 1 ]", None]
    for phase in CASES:
        a, s = reach(phase)
        before = fingerprint(a, s)
        for text in nasty:
            got = a.check_action(s, text)
            assert got.action is None or got.action.strip() == got.action
            if phase != "Day-Discussion":
                assert got.action is None and got.error == PARSING_FAILURE
        rng = random.Random(0)
        for _ in range(20):
            assert a.check_action(s, a.random_action(s, rng)).action is not None
        assert fingerprint(a, s) == before
