"""Three-Player IPD: full bot episodes through the real loop, the step/final facts, the bots'
strategies, reproducibility, and the Action Validator's cases for both phases."""
import json
import random
import re

import pytest

from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE
from mars_core.games.ipd import AlwaysDefectBot, TitForTatBot
from mars_core.games.registry import make_game
from mars_core.rollout.play import EpisodeSpec, play_episodes
from mars_core.types import SamplingParams

GAME = "three_player_ipd"
TFT, AD, RND = "bot:tit-for-tat", "bot:always-defect", "bot:random"


def play(*specs):
    return play_episodes([EpisodeSpec(f"e{i}", GAME, seed, agents)
                          for i, (seed, agents) in enumerate(specs)],
                         None, None, SamplingParams(), progress=False)


def facts(ep):
    return [json.loads(t.info) for t in ep.turns]


def resolved(ep):
    return [f for f in facts(ep) if "round_gain" in f]


def decision_state(seed=0, chats=3):
    """A fresh state stepped through the chat turns (by default: to player 0's decision)."""
    a = make_game(GAME)
    state = a.new_state(seed)
    for _ in range(chats):
        a.play(state, "hello")
    return a, state


def test_always_defect_everyone_draws():
    (ep,) = play((1, (AD, AD, AD)))
    assert not ep.error and len(ep.turns) == 30 and all(t.valid for t in ep.turns)
    assert [f["round_gain"] for f in resolved(ep)] == [[2, 2, 2]] * 5
    assert json.loads(ep.info) == {"scores": [10, 10, 10], "num_rounds": 5, "T": 5,
                                   "rounds_played": 5}
    assert ep.returns == (0.0, 0.0, 0.0) and ep.outcomes == ("draw",) * 3


def test_tit_for_tat_pair_against_always_defect():
    (ep,) = play((2, (TFT, TFT, AD)))
    assert not ep.error and len(ep.turns) == 30
    rounds = resolved(ep)
    # round 1: TFTs cooperate with everyone (3 + 0 each), AD exploits both (5 + 5);
    # later: TFTs cooperate with each other and defect against AD (3 + 1), AD gets 1 + 1
    assert rounds[0]["round_gain"] == [3, 3, 10]
    assert rounds[1]["round_gain"] == [4, 4, 2]
    assert rounds[0]["decisions"] == {"0": {"1": "cooperate", "2": "cooperate"},
                                      "1": {"0": "cooperate", "2": "cooperate"},
                                      "2": {"0": "defect", "1": "defect"}}
    assert rounds[1]["decisions"]["0"] == {"1": "cooperate", "2": "defect"}
    assert [f["round"] for f in rounds] == [1, 2, 3, 4, 5]
    assert json.loads(ep.info) == {"scores": [19, 19, 18], "num_rounds": 5, "T": 5,
                                   "rounds_played": 5}
    assert ep.returns == (1.0, 1.0, -1.0) and ep.outcomes == ("win", "win", "loss")


def test_step_facts_round_and_phase_of_every_step():
    (ep,) = play((3, (RND, RND, RND)))
    got = [(f["round"], f["phase"]) for f in facts(ep)]
    assert got == [(r, ph) for r in range(1, 6) for ph in ["chat"] * 3 + ["decision"] * 3]
    assert [i for i, f in enumerate(facts(ep)) if "round_gain" in f] == [5, 11, 17, 23, 29]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_bots_finish_and_facts_add_up(seed):
    (ep,) = play((seed, (RND, RND, RND)))
    assert not ep.error and len(ep.turns) == 30 and all(t.valid for t in ep.turns)
    info = json.loads(ep.info)
    assert info["rounds_played"] == 5
    rounds = resolved(ep)
    assert [sum(f["round_gain"][p] for f in rounds) for p in range(3)] == info["scores"]
    decisions = [t for t in ep.turns if json.loads(t.info)["phase"] == "decision"]
    for r, f in enumerate(rounds):  # the facts' decisions are the actions actually played
        for t in decisions[3 * r: 3 * r + 3]:
            row = sorted(f["decisions"][str(t.player)].items())
            assert " ".join(f"[{q} {c}]" for q, c in row) == t.action
    assert sorted(ep.returns, reverse=True)[0] in (0.0, 1.0)


def test_tit_for_tat_copies_what_each_opponent_did_to_it():
    (ep,) = play((5, (RND, TFT, RND)))
    rounds = [f["decisions"] for f in resolved(ep)]
    assert rounds[0]["1"] == {"0": "cooperate", "2": "cooperate"}
    for prev, cur in zip(rounds, rounds[1:]):
        assert cur["1"] == {"0": prev["0"]["1"], "2": prev["2"]["1"]}


def test_same_seed_same_episode_and_global_random_untouched():
    random.seed(1234)
    outer = random.getstate()
    first, second = play((7, (RND, RND, TFT)), (7, (RND, RND, TFT)))
    assert random.getstate() == outer
    assert [(t.action, t.info) for t in first.turns] == [(t.action, t.info) for t in second.turns]
    assert first.returns == second.returns and first.info == second.info


def test_bots_build_from_a_seed_and_answer_valid_actions():
    a, state = decision_state()
    for bot in (TitForTatBot(0), AlwaysDefectBot(0)):
        assert a.check_action(state, bot.act(a, state)).action == bot.act(a, state)
    assert AlwaysDefectBot(0).act(a, state) == "[1 defect] [2 defect]"


CHAT = [
    ("I will cooperate if you do.", "I will cooperate if you do.", ""),
    ("  padded  \n", "padded", ""),
    ("[1 defect] is what I'll do", "[1 defect] is what I'll do", ""),
    ("x" * 1000, "x" * 1000, ""),
    ("", None, PARSING_FAILURE),
    (" \n\t ", None, PARSING_FAILURE),
    ("x" * 1001, None, INVALID_ACTION),
]


@pytest.mark.parametrize("text,action,error", CHAT)
def test_chat_validator(text, action, error):
    a = make_game(GAME)
    got = a.check_action(a.new_state(0), text)
    assert (got.action, got.error) == (action, error)
    assert bool(got.detail) == bool(error)


DECISION = [  # for player 0
    ("[1 cooperate] [2 defect]", "[1 cooperate] [2 defect]", ""),
    ("[2 DEFECT], [1 Cooperate]", "[1 cooperate] [2 defect]", ""),
    ("[ 1  cooperate ][2 cooperate]", "[1 cooperate] [2 cooperate]", ""),
    (" [01 defect]\n[2 defect] ", "[1 defect] [2 defect]", ""),
    ("", None, PARSING_FAILURE),
    ("cooperate", None, PARSING_FAILURE),
    ("[1 cooperate] [2 defect] please", None, PARSING_FAILURE),
    ("I choose [1 cooperate] [2 defect]", None, PARSING_FAILURE),
    ("[1 betray] [2 defect]", None, PARSING_FAILURE),
    ("[1cooperate] [2 defect]", None, PARSING_FAILURE),
    ("[[1 cooperate]] [2 defect]", None, PARSING_FAILURE),
    ("[-1 cooperate] [2 defect]", None, PARSING_FAILURE),
    ("[12345 cooperate]", None, PARSING_FAILURE),
    ("[0 cooperate] [1 cooperate] [2 defect]", None, INVALID_ACTION),  # naming yourself
    ("[1 cooperate] [3 defect]", None, INVALID_ACTION),  # no player 3
    ("[1 cooperate] [1 defect] [2 defect]", None, INVALID_ACTION),  # named twice
    ("[1 cooperate] [1 cooperate]", None, INVALID_ACTION),
    ("[2 defect]", None, INVALID_ACTION),  # missing an opponent
]


@pytest.mark.parametrize("text,action,error", DECISION)
def test_decision_validator(text, action, error):
    a, state = decision_state()
    got = a.check_action(state, text)
    assert (got.action, got.error) == (action, error)
    assert bool(got.detail) == bool(error)


def test_decision_validator_for_another_seat():
    a, state = decision_state()
    a.play(state, "[1 cooperate] [2 cooperate]")
    assert a.current_player(state) == 1
    assert a.check_action(state, "[2 defect] [0 cooperate]").action == "[0 cooperate] [2 defect]"
    assert a.check_action(state, "[1 cooperate] [2 defect]").error == INVALID_ACTION


HOSTILE = ["x" * 2_000_000, "[1 cooperate] " * 100_000, "\x00\x1b[0m", "\ud800",
           "[" * 50_000 + "1 cooperate" + "]" * 50_000, "[١ cooperate] [٢ defect]",
           "[1 cooperate] [2 defect]" * 3, "[9" + "9" * 10_000 + " defect]"]


@pytest.mark.parametrize("text", HOSTILE)
def test_validator_never_raises_nor_changes_the_state(text):
    for chats in (0, 3):
        a, state = decision_state(chats=chats)
        state.memory["decisions"] = []
        before = a.snapshot(state), a.current_player(state), json.dumps(state.memory)
        got = a.check_action(state, text)
        assert got.error in ("", PARSING_FAILURE, INVALID_ACTION) and "\n" not in got.detail
        a.random_action(state, random.Random(0))
        assert (a.snapshot(state), a.current_player(state), json.dumps(state.memory)) == before


def answers(text):
    return re.findall(r"<answer>(.*?)</answer>", text)


def test_examples_in_rules_and_instructions_are_valid():
    a, rng = make_game(GAME), random.Random(0)
    state = a.new_state(0)
    while not a.is_terminal(state):
        p = a.current_player(state)
        (instruction,) = answers(a.instruction(state, p))
        in_rules = answers(a.rules(p))
        assert len([x for x in in_rules if x.startswith("[")]) == 1
        if not a.in_chat(state):  # a chat example is no decision
            in_rules = [x for x in in_rules if x.startswith("[")]
        examples = [instruction, *in_rules]
        for example in examples:
            assert a.check_action(state, example).action == example
        a.play(state, a.random_action(state, rng))


def test_observation_replaces_the_env_example_that_names_the_seat_itself():
    a = make_game(GAME)
    state = a.new_state(0)
    a.play(state, "hi")
    obs = a.observation(state, 1, [])
    assert "[1 defect] [2 cooperate]" not in obs and "[0 defect] [2 cooperate]" in obs
    assert "the default is 'cooperate'" not in obs
