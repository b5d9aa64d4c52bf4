"""Property tests of the Action Validator: any reply string, for any game, in any phase and
role, is either a playable action or an invalid action with a typed error; it never raises,
and a reply it accepts never makes the game raise either. 10,000 generated replies per game
(`make test-full`; `make test` 2,000)."""
from __future__ import annotations

import random
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE, format_answer
from mars_core.games.registry import GAMES, make_game
from mars_core.rollout.validator import validate
from tests.conftest import FULL

pytestmark = pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out

REPLIES_PER_EXAMPLE = 10  # 1,000 examples x 10 replies = 10,000 replies per game
EXAMPLES_PER_GAME = 1_000 if FULL else 200  # `make test`: 2,000 replies per game
STATES_PER_GAME = 60


@lru_cache(maxsize=None)
def positions(game: str) -> tuple:
    """States from random games of every phase and seat, with a valid action for each."""
    adapter, out, seed = make_game(game), [], 0
    while len(out) < STATES_PER_GAME:
        rng = random.Random(seed)
        state = adapter.new_state(seed)
        while not adapter.is_terminal(state) and len(out) < STATES_PER_GAME:
            action = adapter.random_action(state, rng)
            if rng.random() < 0.5:  # spread the sample over whole games
                out.append((adapter.clone(state), action))
            adapter.play(state, action)
        seed += 1
    return tuple(out)


_BRACKETS = st.sampled_from(["[", "]", "<", ">", "<answer>", "</answer>", "<think>", "</think>",
                             "[[", "]]", "<<", ">>", " ", "\n", "\x00", "\u202e", "\U0001F600"])
_CHUNK = st.one_of(st.text(max_size=12), _BRACKETS, st.sampled_from(
    ["A7", "B7 C6", "cooperate", "defect", "1", "2", "pass", "Player 3", "X(1,1)", "BET",
     "Play card 0", "20", "-5", "99999999999999999999", "wind 2", ":", ","]))
_SOUP = st.lists(_CHUNK, max_size=12).map("".join)


def _replies(valid_action: str):
    wrapped = st.one_of(_SOUP, st.just(valid_action), _SOUP.map(lambda s: valid_action + s),
                        _SOUP.map(lambda s: s + valid_action))
    return st.one_of(
        st.text(max_size=300),
        st.text(alphabet=st.characters(categories=["Cc", "Cs", "Co", "Zs"]), max_size=50),
        _SOUP,
        wrapped.map(format_answer),
        st.tuples(st.text(max_size=80), wrapped).map(lambda p: p[0] + format_answer(p[1])),
        st.tuples(wrapped, wrapped).map(lambda p: format_answer(p[0]) + format_answer(p[1])),
        st.tuples(wrapped, _SOUP).map(lambda p: format_answer(p[0]) + p[1]),
        wrapped.map(lambda a: "<think>" + a + "</think>" + format_answer(a)),
        st.integers(1, 6).flatmap(lambda n: wrapped.map(lambda a: "<answer>" * n + a + "</answer>" * n)),
    )


@st.composite
def _case(draw, game: str):
    states = positions(game)
    state, valid_action = states[draw(st.integers(0, len(states) - 1))]
    replies = draw(st.lists(_replies(valid_action), min_size=REPLIES_PER_EXAMPLE,
                            max_size=REPLIES_PER_EXAMPLE))
    return state, replies


def _check(game: str, state, reply: str) -> None:
    adapter = make_game(game)
    verdict = validate(adapter, state, reply)
    if verdict.action is None:
        assert verdict.error in (PARSING_FAILURE, INVALID_ACTION)
        assert verdict.detail and "\n" not in verdict.detail
        return
    assert verdict.error == ""
    adapter.play(adapter.clone(state), verdict.action)  # the game accepts what passed


@pytest.mark.parametrize("game", list(GAMES))
def test_any_reply_is_an_action_or_a_typed_error(game):
    @settings(max_examples=EXAMPLES_PER_GAME, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(_case(game))
    def run(case):
        state, replies = case
        for reply in replies:
            _check(game, state, reply)

    run()


@pytest.mark.parametrize("game", list(GAMES))
def test_huge_replies_are_typed_errors(game):
    state, action = positions(game)[0]
    for reply in ("x" * 2_000_000, format_answer("[" * 1_000_000), format_answer(action * 50_000),
                  "<answer>" * 100_000, format_answer(action) + "\x00" * 1_000_000):
        _check(game, state, reply)


@pytest.mark.parametrize("game", list(GAMES))
def test_bots_random_actions_are_valid(game):
    for state, action in positions(game):
        adapter = make_game(game)
        assert validate(adapter, state, format_answer(action)).action == action
