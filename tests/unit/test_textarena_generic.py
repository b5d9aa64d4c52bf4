"""The generic TextArena adapter: every sampled game plays to its end (or 40 moves) with random
actions on all seats, each action passing the Action Validator and accepted by the env; the
validator never raises and never changes the episode; refused ids say why, by name; a seed
replays its episode."""
from __future__ import annotations

import random
import sys

import pytest

from mars_core.games import textarena_generic as tg
from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE, Parsed
from mars_core.games.textarena_games import TextArenaGame

# The ids random play finishes (or plays 40 moves of) with every action valid, seeds 0-7
# checked; the module docstring names the games whose moves random play cannot guess.
PLAYABLE_SAMPLE = (
    "Battleship-v0", "Briscola-v0", "ConnectFour-v0", "Crusade-v0", "GameOfPureStrategy-v0",
    "GermanWhist-v0", "Golf-v0", "HighSociety-v0", "IndianPoker-v0",
    "IteratedMatchingPennies-v0", "IteratedPrisonersDilemma-v0", "IteratedRockPaperScissors-v0",
    "IteratedTwoThirdsAverage-v0", "IteratedUltimatumGame-v0", "KuhnPoker-v0", "LiarsDice-v0",
    "MarketEntryGame-v0", "MemoryGame-v0", "Nim-v0", "Othello-v0", "PigDice-v0", "Poker-v0",
    "PublicGoodsGame-v0", "SantoriniBaseFixed-v0", "SecretMafia-v0", "SettlersOfCatan-v0",
    "SimpleBlindAuction-v0", "SimpleNegotiation-v0", "SimpleTak-v0", "Snake-v0",
    "SpiteAndMalice-v0", "Stratego-v0", "Surround-v0", "Taboo-v0", "ThreePlayerGOPS-v0",
    "ThreePlayerIPD-v0", "ThreePlayerTicTacToe-v0", "TicTacToe-v0", "TruthAndDeception-v0",
    "UltimateTicTacToe-v0", "WildTicTacToe-v0")
MOVES = 40

HOSTILE = ("", " ", "\n\n", "[", "]", "[]", "[[]]", "[[[[0]]]]", "[" * 10_000, "x" * 10_000,
           "[" + "1 " * 4999 + "]", "[" + "a" * 999 + "]", "</answer>", "[0]</answer>",
           "<answer>[0]</answer>", "<think>[0]", "\x00[0]\x00", "[\u202e0]", "[💣]", "[Ω≈ç√]",
           "[\ud800]", "[0]\n[1]", "\r\n[0]\r\n", "[-1]", "[99999999999999999999]", "[1e309]",
           "[nan]", "[None]", "[0, 0, 0, 0, 0]", "{}", "[${jndi:ldap://x}]", "'; DROP TABLE x;",
           "[\t]", "[0 0]" * 200, "[%s%s%n]", "[(((((((((((a]", "[.*]", "[\\]", "[Accept] " * 100)


def play(game: str, seed: int, moves: int = MOVES, fuzz: bool = False):
    """Random actions on every seat from a fresh episode: (actions, returns, state)."""
    adapter = tg.adapter(game)()
    state, rng, actions = adapter.new_state(seed), random.Random(seed), []
    while not adapter.is_terminal(state) and len(actions) < moves:
        player = adapter.current_player(state)
        adapter.observation(state, player, [])
        if fuzz:
            for text in HOSTILE:
                assert_parsed(adapter.check_action(state, text), text)
        action = adapter.random_action(state, rng)
        assert adapter.check_action(state, action) == Parsed(action), (game, len(actions), action)
        adapter.play(state, action)  # raises when the env rejects it
        actions.append(action)
    return actions, adapter.returns(state), state


def assert_parsed(got, text) -> None:
    assert isinstance(got, Parsed)
    if got.action is None:
        assert got.error in (PARSING_FAILURE, INVALID_ACTION) and got.detail
        assert "\n" not in got.detail and len(got.detail) < 200
    else:
        assert got.action == text.strip() and not got.error


def test_the_ids_are_the_registered_v0_ids():
    ids = tg.env_ids()
    assert ids == tuple(sorted(ids)) and len(ids) >= 90
    assert all(i.endswith("-v0") for i in ids) and set(PLAYABLE_SAMPLE) <= set(ids)
    listed = dict(tg.playable())
    assert list(listed) == list(ids)
    assert all(listed[g] == "" for g in PLAYABLE_SAMPLE)
    assert all(reason == "" or "\n" not in reason for reason in listed.values())


@pytest.mark.parametrize("game", PLAYABLE_SAMPLE)
def test_random_play_is_valid_to_the_end(game):
    """...and an episode does not depend on the global random state (the env draws from the
    episode's own; comparing the global state before and after would also see other threads
    of the test process draw)."""
    info = tg.describe(game)
    assert info["num_players"] >= 2 and info["cooperative"] is False and info["title"]
    for seed in (0, 1):
        random.seed(100 + seed)
        actions, returns, state = play(game, seed)
        assert actions and len(returns) == info["num_players"]
        assert all(-1.0 <= r <= 1.0 for r in returns)
        assert state.done or len(actions) == MOVES
        random.seed(999)
        assert play(game, seed)[:2] == (actions, returns)


@pytest.mark.parametrize("game", ["TicTacToe-v0", "Poker-v0", "SimpleNegotiation-v0",
                                  "Stratego-v0", "SecretMafia-v0"])
def test_the_validator_never_raises_nor_changes_the_episode(game):
    fuzzed = play(game, 3, moves=6, fuzz=True)
    assert fuzzed[:2] == play(game, 3, moves=6)[:2]
    adapter = tg.adapter(game)()
    state = adapter.new_state(0)
    assert adapter.check_action(state, None).error == PARSING_FAILURE
    assert adapter.check_action(state, 12).error == PARSING_FAILURE


def test_the_error_types():
    adapter = tg.adapter("TicTacToe-v0")()
    state = adapter.new_state(0)
    assert adapter.check_action(state, "  [4] ") == Parsed("[4]")
    assert adapter.check_action(state, "I take the centre").error == PARSING_FAILURE
    bad = adapter.check_action(state, "[9]")
    assert bad.error == INVALID_ACTION and "9" in bad.detail
    chat = tg.adapter("SimpleNegotiation-v0")()
    assert chat.check_action(chat.new_state(0), "shall we trade?") == Parsed("shall we trade?")


def test_the_same_seed_replays_the_episode():
    first = play("LiarsDice-v0", 7)
    assert first[:2] == play("LiarsDice-v0", 7)[:2]
    assert [play("LiarsDice-v0", s)[0] for s in range(4)] != [first[0]] * 4


def test_one_class_per_id_with_the_env_traits():
    cls = tg.adapter("TicTacToe-v0")
    assert cls is tg.adapter("textarena:TicTacToe-v0") and issubclass(cls, TextArenaGame)
    assert (cls.name, cls.num_players, cls.title) == ("textarena:TicTacToe-v0", 2, "Tic Tac Toe")
    assert cls.perfect_information and not tg.adapter("Poker-v0").perfect_information
    assert tg.describe("SecretMafia-v0")["num_players"] == 6
    assert tg.describe("Poker-v0")["hidden_information"] is True
    assert tg.adapter("IteratedUltimatumGame-v0").move_limit is None  # the env's own max_turns
    assert tg.adapter("Stratego-v0").move_limit == tg.DEFAULT_MOVE_LIMIT


def test_a_game_without_a_turn_limit_stops_at_the_move_limit_as_a_draw():
    short = type("ShortStratego", (tg.adapter("Stratego-v0"),), {"move_limit": 4})()
    state, rng = short.new_state(0), random.Random(0)
    for _ in range(4):
        rewards, info = short.play(state, short.random_action(state, rng))
    assert short.is_terminal(state) and rewards == [0.0, 0.0] and info["move_limit"] == 4


REFUSED = [("Foo-v0", "unknown TextArena environment; see `mars games`"),
           ("2048-v0", "a single-player game: self-play has no meaning"),
           ("Debate-v0", "needs an LLM judge over the network (OpenRouter)"),
           ("Sudoku-v0", "a single-player game")]
if sys.version_info < (3, 12):  # textarena 0.7.4's Chess module uses Python 3.12 f-strings
    REFUSED.append(("Chess-v0", "its module does not compile on Python"))


@pytest.mark.parametrize("game,reason", REFUSED)
def test_refused_ids_say_why_by_name(game, reason):
    for ask in (tg.describe, tg.adapter):
        with pytest.raises(ValueError) as err:
            ask(f"textarena:{game}")
        message = str(err.value)
        assert message.startswith(f"textarena:{game}: {reason}") and "\n" not in message
