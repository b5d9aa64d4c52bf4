"""Codenames: offline word list, random-bot episodes, the Action Validator and the step facts."""
import json
import pickle
import random
import re
import socket
import sys

import pytest

from mars_core.games import codenames as cn
from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE
from mars_core.games.registry import make_game
from mars_core.rollout.play import EpisodeSpec, play_episodes
from mars_core.types import SamplingParams

WIN_RED, WIN_BLUE, DRAW = (1.0, 1.0, -1.0, -1.0), (-1.0, -1.0, 1.0, 1.0), (0.0,) * 4


@pytest.fixture(scope="module")
def game():
    return make_game("codenames")


def words_of(state, colour):
    return [w for w, c in state.env.board.items() if c == colour]


def play_random(game, state, seed=0, limit=200):
    rng = random.Random(seed)
    for _ in range(limit):
        if game.is_terminal(state):
            return
        action = game.random_action(state, rng)
        assert game.check_action(state, action).action == action
        game.play(state, action)
    raise AssertionError("the episode did not end")


def operative_with_revealed(game, seed=3):
    """Blue operative to move after Red revealed a neutral word; returns (state, that word)."""
    state = game.new_state(seed)
    neutral = words_of(state, "N")[0]
    for action in ("[wind 1]", f"[{neutral}]", "[wind 2]"):
        game.play(state, action)
    assert game.current_player(state) == 3
    return state, neutral


# -- word list -------------------------------------------------------------------------------
def test_word_list_follows_its_rules():
    words = cn.word_list()
    assert 300 <= len(words) <= 500
    assert len(set(words)) == len(words)
    assert all(re.fullmatch(r"[a-z]{3,7}", w) for w in words)
    assert not [(a, b) for a in words for b in words if a != b and a in b]
    assert "pass" not in words
    for example in cn.EXAMPLE_CLUES:  # the env's own prompt example `[wind 2]` is always valid
        assert not cn.clue_problem(example, words)


def test_fresh_env_never_touches_nltk_or_network(monkeypatch):
    import nltk

    def refuse(*args, **kwargs):
        raise AssertionError("network or nltk data used")

    monkeypatch.setattr(nltk, "download", refuse)
    monkeypatch.setattr(nltk.data, "find", refuse)
    monkeypatch.setattr(nltk.data, "load", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    old_module = cn._base_env_class().__module__
    imported = sys.modules[old_module]
    monkeypatch.delitem(sys.modules, old_module)
    cn.offline_env_class.cache_clear()
    try:
        game = cn.Codenames()
        state = game.new_state(7)
        assert set(state.env.board) <= set(cn.word_list()) and len(state.env.board) == 25
        play_random(game, state, seed=7)
        assert nltk.download is refuse
        assert sys.modules[old_module] is not imported  # the env module really was re-run
    finally:
        cn.offline_env_class.cache_clear()


# -- whole episodes --------------------------------------------------------------------------
def test_random_bot_episodes_finish_with_consistent_outcomes():
    before = random.getstate()
    specs = [EpisodeSpec(f"e{s}", "codenames", s, ("bot:random",) * 4) for s in range(16)]
    episodes = play_episodes(specs, None, None, SamplingParams(), progress=False)
    assert random.getstate() == before
    for ep in episodes:
        assert not ep.error and all(t.valid for t in ep.turns)
        assert ep.returns in (WIN_RED, WIN_BLUE, DRAW)
        expected = {WIN_RED: ("win", "win", "loss", "loss"),
                    WIN_BLUE: ("loss", "loss", "win", "win"), DRAW: ("draw",) * 4}
        assert ep.outcomes == expected[ep.returns]
        assert all(t.role == cn.ROLES[t.player] for t in ep.turns)
        info = json.loads(ep.info)
        assert info["teams"] == ["red", "red", "blue", "blue"]
        assert info["team_words"] == {"red": 9, "blue": 8}
        for team, n in info["found"].items():
            assert 0 <= n <= info["team_words"][team]
        facts = [json.loads(t.info) for t in ep.turns]
        for t, f in zip(ep.turns, facts):
            assert f["team"] == ("red" if t.player < 2 else "blue")
            assert f["kind"] in (("clue",) if t.player in (0, 2) else ("guess", "pass"))
        own = {team: sum(1 for f in facts if f["kind"] == "guess" and f["team"] == team
                         and f["label"] == "own") for team in ("red", "blue")}
        opp = {team: sum(1 for f in facts if f["kind"] == "guess" and f["team"] != team
                         and f["label"] == "opponent") for team in ("red", "blue")}
        assert info["found"] == {team: own[team] + opp[team] for team in ("red", "blue")}


def test_roles(game):
    assert [game.role(p) for p in range(4)] == ["red_spymaster", "red_operative",
                                                 "blue_spymaster", "blue_operative"]


def test_same_seed_same_board_and_episode(game):
    a, b, c = game.new_state(11), game.new_state(11), game.new_state(12)
    assert list(a.env.board.items()) == list(b.env.board.items())
    assert a.env.board != c.env.board
    play_random(game, a, seed=5)
    play_random(game, b, seed=5)
    assert a.env.state.logs == b.env.state.logs and game.returns(a) == game.returns(b)


def test_global_random_state_untouched(game):
    random.seed(1234)
    before = random.getstate()
    state = game.new_state(4)
    game.check_action(state, "[wind 2]")
    game.instruction(state, 0)
    play_random(game, state, seed=4)
    game.final_info(state)
    assert random.getstate() == before


def test_turn_limit_with_equal_counts_is_a_draw(game):
    state = game.new_state(2)
    moves = 0
    while not game.is_terminal(state):
        player = game.current_player(state)
        rewards, _ = game.play(state, "[wind 1]" if player in (0, 2) else "[pass]")
        moves += 1
    assert moves > 80 and rewards == [0.0] * 4 and game.returns(state) == [0.0] * 4
    assert [game.outcome(rewards, p) for p in range(4)] == ["draw"] * 4
    assert game.final_info(state)["found"] == {"red": 0, "blue": 0}


# -- Action Validator ------------------------------------------------------------------------
CLUE_CASES = [  # (text, error, canonical); {w}: a board word of 5+ letters
    ("[{W} 2]", INVALID_ACTION, None),  # a board word in another case
    ("[super{w} 2]", INVALID_ACTION, None),  # contains a board word
    ("[{part} 2]", INVALID_ACTION, None),  # part of a board word
    ("[big wind 2]", PARSING_FAILURE, None),  # two words
    ("[wind]", PARSING_FAILURE, None),  # no number
    ("[wind 12]", PARSING_FAILURE, None),  # the number is one digit
    ("[wind -1]", PARSING_FAILURE, None),
    ("[pass]", PARSING_FAILURE, None),
    ("", PARSING_FAILURE, None),
    ("[[wind 2]]", PARSING_FAILURE, None),  # nested brackets
    ("[wind 2] [music 1]", PARSING_FAILURE, None),  # two actions
    ("wind 2", PARSING_FAILURE, None),
    ("[w1nd 2]", PARSING_FAILURE, None),
    ("[WIND 2]", "", "[wind 2]"),
    ("  [ Wind   3 ] ", "", "[wind 3]"),
]
GUESS_CASES = [  # {u}: an unrevealed board word, {r}: the revealed one
    ("[{U}]", "", "[{u}]"),
    ("[wind]", INVALID_ACTION, None),  # off the board
    ("[{r}]", INVALID_ACTION, None),  # already revealed
    ("[{R}]", INVALID_ACTION, None),
    ("[PASS]", "", "[pass]"),
    ("[pass]", "", "[pass]"),
    ("", PARSING_FAILURE, None),
    ("[[{u}]]", PARSING_FAILURE, None),  # nested brackets
    ("[{u}] [pass]", PARSING_FAILURE, None),
    ("[{u} 2]", PARSING_FAILURE, None),  # a clue on a guessing turn
    ("[two words]", PARSING_FAILURE, None),
    ("{u}", PARSING_FAILURE, None),
]


@pytest.mark.parametrize("template,error,canonical", CLUE_CASES)
def test_clue_validator(game, template, error, canonical):
    state = game.new_state(3)
    w = next(w for w in state.env.board if len(w) >= 5)
    text = template.format(W=w.upper(), w=w, part=w[1:-1])
    got = game.check_action(state, text)
    assert (got.error, got.action) == (error, canonical), got.detail
    assert bool(got.detail) == bool(error)
    if canonical:
        game.play(state, got.action)
        assert game.current_player(state) == 1


@pytest.mark.parametrize("template,error,canonical", GUESS_CASES)
def test_guess_validator(game, template, error, canonical):
    state, revealed = operative_with_revealed(game)
    u = next(w for w in state.env.board if w not in state.env.state.game_state["guessed_words"])
    fill = {"u": u, "U": u.upper(), "r": revealed, "R": revealed.upper()}
    got = game.check_action(state, template.format(**fill))
    assert (got.error, got.action) == (error, canonical and canonical.format(**fill)), got.detail
    if canonical:
        game.play(state, got.action)


def test_validator_never_raises_nor_changes_state(game):
    state, _ = operative_with_revealed(game)
    spymaster = game.new_state(3)
    weird = ["", " ", "[", "]", "[]", "[ ]", "\x00[\x01]", "[" * 100000, "x" * 2_000_000,
             "[été]", "[wind ٢]", "[9]", "[wind 99999999999999999999]", "[" + "a" * 5000 + "]",
             "[wind 2]\n[wind 3]", "\u202e[pass]", "[pass ]", "<answer>[pass]</answer>", None]
    for s in (state, spymaster):
        before = (dict(s.env.board), set(s.env.state.game_state["guessed_words"]),
                  game.current_player(s), s.random_state, len(s.env.state.logs))
        for text in weird:
            got = game.check_action(s, text)
            assert got.action is None or got.action in ("[pass]",)
            assert "\n" not in got.detail
        game.random_action(s, random.Random(0))
        assert before == (dict(s.env.board), set(s.env.state.game_state["guessed_words"]),
                          game.current_player(s), s.random_state, len(s.env.state.logs))


def test_an_unvalidated_move_the_env_rejects_raises(game):
    state = game.new_state(3)
    with pytest.raises(RuntimeError, match="validator bug"):
        game.play(state, f"[{next(iter(state.env.board))} 2]")  # the env's subset rule
    state = game.new_state(3)
    game.play(state, "[wind 1]")
    with pytest.raises(RuntimeError, match="validator bug"):
        game.play(state, "[wind]")  # off the board: the env skips the turn silently


# -- prompts and facts -----------------------------------------------------------------------
def test_instructions(game):
    state = game.new_state(3)
    spy = game.instruction(state, 0)
    example = re.search(r"<answer>\[(\w+) (\d)\]</answer>", spy).group(1)
    assert not cn.clue_problem(example, state.env.board)
    assert game.check_action(state, f"[{example} 2]").action == f"[{example} 2]"
    game.play(state, "[music 2]")
    op = game.instruction(state, 1)
    assert "[music 2]" in op and "guesses left this turn: 3" in op and "[pass]" in op


def test_step_facts_assassin_guess_loses(game):
    state = game.new_state(8)
    assassin = words_of(state, "A")[0]
    _, facts = game.play(state, "[wind 1]")
    assert facts == {"kind": "clue", "team": "red", "word": "wind", "number": 1}
    rewards, facts = game.play(state, f"[{assassin}]")
    assert facts == {"kind": "guess", "team": "red", "word": assassin, "label": "assassin"}
    assert game.is_terminal(state) and rewards == list(WIN_BLUE)
    assert game.final_info(state) == {"teams": ["red", "red", "blue", "blue"],
                                      "team_words": {"red": 9, "blue": 8},
                                      "found": {"red": 0, "blue": 0}}


def test_step_facts_labels_and_pass(game):
    state = game.new_state(9)
    own, opponent = words_of(state, "R")[0], words_of(state, "B")[0]
    game.play(state, "[wind 2]")
    assert game.play(state, f"[{own}]")[1]["label"] == "own"
    assert game.play(state, "[pass]")[1] == {"kind": "pass", "team": "red"}
    game.play(state, "[wind 1]")
    neutral = words_of(state, "N")[0]
    assert game.play(state, f"[{neutral}]")[1] == {"kind": "guess", "team": "blue",
                                                   "word": neutral, "label": "neutral"}
    game.play(state, "[wind 1]")
    facts = game.play(state, f"[{opponent}]")[1]
    assert facts["label"] == "opponent" and facts["team"] == "red"
    assert game.final_info(state)["found"] == {"red": 1, "blue": 1}


def test_clone_and_pickle_keep_the_board(game):
    state = game.new_state(6)
    for copy in (game.clone(state), pickle.loads(pickle.dumps(state))):
        assert copy.env.board == state.env.board
        play_random(game, copy, seed=1)
    assert not game.is_terminal(state)
