"""The Hanabi adapters: action strings, rendering (hidden own cards, hints), shared rewards."""
import random
import re

import pyspiel
import pytest

from mars_core.games.hanabi import MiniHanabi, SimpleHanabi
from mars_core.games.openspiel_games import _Seeded
from mars_core.games.registry import make_game

FORMS = re.compile(r"<Play card \d+>|<Discard card \d+>|<Reveal player \+1 color [A-Z]>"
                   r"|<Reveal player \+1 rank \d+>")
TAGS = {"<answer>", "</answer>", "<think>", "</think>"}


class _Deal:
    """A random source that deals the given cards in order (scripted hands and draws), then
    the first card still in the deck."""

    def __init__(self, cards):
        self.cards = list(cards)

    def choices(self, actions, weights):
        return [self.cards.pop(0) if self.cards else actions[0]]

    def random(self):
        return 0.0


def dealt(g, cards):
    """A game whose deal (player 0's hand, player 1's hand, then the draws) is `cards`."""
    s = g.game.new_initial_state()
    ids = {s.action_to_string(pyspiel.PlayerId.CHANCE, a)[6:-1]: a for a, _ in s.chance_outcomes()}
    state = _Seeded(s, _Deal(ids[c] for c in cards))
    g._resolve_chance(state)
    return state


def play(g, state, action):
    return g.apply(state, g.legal_actions(state)[action])


def to_ours(openspiel_string):
    """The expected adapter string, written independently of the adapter."""
    inner = openspiel_string[1:-1]
    m = re.fullmatch(r"(Play|Discard) (\d+)", inner)
    return f"<{m[1]} card {m[2]}>" if m else f"<{inner}>"


def random_positions(g, seeds, rng_seed=0):
    """Every position of a few random games (state clones)."""
    rng = random.Random(rng_seed)
    for seed in seeds:
        s = g.new_state(seed)
        while not g.is_terminal(s):
            yield g.clone(s)
            g.apply(s, rng.choice(list(g.legal_actions(s).values())))


def test_registry_and_constants():
    mini, simple = make_game("mini_hanabi"), make_game("simple_hanabi")
    assert isinstance(mini, MiniHanabi) and isinstance(simple, SimpleHanabi)
    for g in (mini, simple):
        assert g.cooperative and not g.draw_bonus and g.num_players == 2
        assert g.role(0) == "player_0" and g.role(1) == "player_1"
    assert mini.utility_range() == (0.0, 4.0) and simple.utility_range() == (0.0, 6.0)
    # OpenSpiel's deck: three 1s and one top card per colour at two ranks
    assert mini.deck == {"R1": 3, "R2": 1, "Y1": 3, "Y2": 1}
    assert simple.deck == {"R1": 3, "R2": 1, "Y1": 3, "Y2": 1, "G1": 3, "G2": 1}
    assert "8 cards in all" in mini.rules(0) and "12 cards in all" in simple.rules(0)


@pytest.mark.parametrize("cls", [MiniHanabi, SimpleHanabi])
def test_action_strings_map_both_ways(cls):
    g = cls()
    for s in random_positions(g, range(4)):
        p = g.current_player(s)
        ids = s.s.legal_actions(p)
        legal = g.legal_actions(s)
        assert len(legal) == len(ids)
        for a in ids:
            ours = g.action_string(s, p, a)
            assert ours == to_ours(s.s.action_to_string(p, a)) and legal[ours] == a
            assert FORMS.fullmatch(ours)


def test_token_limits_shape_legal_actions():
    g = MiniHanabi()
    s = dealt(g, ["R1", "R1", "Y1", "Y1", "R1", "Y1"])
    assert not any(a.startswith("<Discard") for a in g.legal_actions(s))  # info tokens at max
    for _ in range(3):
        play(g, s, "<Reveal player +1 rank 1>")
    assert not any(a.startswith("<Reveal") for a in g.legal_actions(s))  # no info tokens left
    assert "Information tokens: 0 of 3." in g.observation(s, 1, [])
    assert "<Discard card 0>" in g.legal_actions(s)


def test_own_cards_are_hidden_and_partners_shown():
    g = MiniHanabi()
    a = dealt(g, ["R1", "R1", "R2", "Y1", "Y1", "Y2"])
    b = dealt(g, ["R1", "Y1", "R1", "Y1", "Y1", "Y2"])  # only player 0's own cards differ
    obs = g.observation(a, 0, [])
    assert obs == g.observation(b, 0, [])
    assert g.observation(a, 1, []) != g.observation(b, 1, [])
    assert "Partner's hand:\n  card 0: Y1 (partner knows: color ?, rank ?)\n  card 1: Y1" in obs
    assert "  card 2: Y2 (partner knows: color ?, rank ?)" in obs
    assert "Your hand:\n  card 0: hidden (you know: color ?, rank ?)" in obs
    for p, s in ((0, a), (1, a)):
        own = g.observation(s, p, []).split("Your hand:")[1].split("Legal actions")[0]
        assert re.findall(r"card \d: (\S+)", own) == ["hidden"] * 3


def test_knowledge_after_reveals():
    g = MiniHanabi()
    s = dealt(g, ["R1", "R1", "Y1", "Y1", "R1", "Y1"])
    play(g, s, "<Reveal player +1 color R>")
    obs1 = g.observation(s, 1, [(0, "<Reveal player +1 color R>")])
    assert obs1.startswith("Partner played <Reveal player +1 color R>.\n")
    assert "Information tokens: 2 of 3." in obs1
    # the hinted card is red; with two colours the others must be yellow
    assert "card 0: hidden (you know: color Y, rank ?)" in obs1
    assert "card 1: hidden (you know: color R, rank ?)" in obs1
    play(g, s, "<Reveal player +1 rank 1>")
    obs0 = g.observation(s, 0, [(1, "<Reveal player +1 rank 1>")])
    assert "card 1: R1 (partner knows: color R, rank ?)" in obs0
    assert "card 0: Y1 (partner knows: color Y, rank ?)" in obs0
    assert obs0.count("hidden (you know: color ?, rank 1)") == 3


def test_card_indices_match_actions():
    """Playing card i removes the card shown at index i; the drawn card goes last."""
    g = MiniHanabi()
    s = dealt(g, ["R1", "Y1", "R2", "Y1", "R1", "Y1", "R1", "Y2"])
    assert "card 1: Y1" in g.observation(s, 1, []).split("Your hand:")[0]
    assert play(g, s, "<Play card 1>") == [1.0, 1.0]
    obs = g.observation(s, 1, [(0, "<Play card 1>")])
    partner = obs.split("Partner's hand:")[1].split("Your hand:")[0]
    assert re.findall(r"card (\d): (\w+)", partner) == [("0", "R1"), ("1", "R2"), ("2", "R1")]
    assert "R0, Y1. Next playable: R1, Y2. Score: 1 of 4." in obs
    assert "Deck: 1 card left." in obs


def test_shared_rewards_and_losing_the_last_life_zeroes_the_score():
    g = MiniHanabi()
    s = dealt(g, ["R1", "R1", "Y1", "Y1", "R1", "Y1", "R2", "Y2"])
    steps = [play(g, s, "<Play card 0>")]  # R1 fits: +1 for both seats
    assert g.returns(s) == [1.0, 1.0]
    steps.append(play(g, s, "<Play card 1>"))  # a second R1: a life lost, deck now empty
    steps.append(play(g, s, "<Play card 0>"))  # R1 again: one life left
    assert "Life tokens: 1 of 3." in g.observation(s, 1, [])
    steps.append(play(g, s, "<Play card 2>"))  # Y2 before Y1: the last life, and the points
    assert steps == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [-1.0, -1.0]]
    assert g.is_terminal(s) and g.returns(s) == list(s.s.returns()) == [0.0, 0.0]
    assert [sum(r) for r in zip(*steps)] == g.returns(s)
    assert [g.outcome(g.returns(s), p) for p in (0, 1)] == ["loss", "loss"]


def test_perfect_game_is_a_win():
    g = MiniHanabi()
    s = dealt(g, ["R1", "R2", "Y1", "Y2", "Y1", "R1", "R1", "Y1"])
    steps = [play(g, s, a) for a in ("<Play card 0>", "<Play card 1>", "<Play card 0>",
                                     "<Play card 0>")]
    assert steps == [[1.0, 1.0]] * 4
    assert g.is_terminal(s) and g.returns(s) == list(s.s.returns()) == [4.0, 4.0]
    assert g.outcome(g.returns(s), 0) == "win"


@pytest.mark.parametrize("cls", [MiniHanabi, SimpleHanabi])
def test_step_rewards_sum_to_openspiel_returns(cls):
    g = cls()
    rng = random.Random(1)
    for seed in range(30):
        s, total = g.new_state(seed), [0.0, 0.0]
        while not g.is_terminal(s):
            r = g.apply(s, rng.choice(list(g.legal_actions(s).values())))
            assert r[0] == r[1]
            total = [t + x for t, x in zip(total, r)]
        assert total == g.returns(s) == list(s.s.returns())


def test_forfeit_and_outcome():
    mini, simple = MiniHanabi(), SimpleHanabi()
    s = dealt(mini, ["R1", "R1", "Y1", "Y1", "R1", "Y1"])
    play(mini, s, "<Play card 0>")
    assert mini.returns(s) == [1.0, 1.0] and mini.forfeit_return(s, 1) == 0.0
    assert [mini.outcome(r, 0) for r in ([4.0, 4.0], [0.0, 0.0], [2.0, 2.0])] == \
        ["win", "loss", "draw"]
    assert [simple.outcome(r, 1) for r in ([6.0, 6.0], [4.0, 4.0], [0.0, 0.0])] == \
        ["win", "draw", "loss"]


@pytest.mark.parametrize("cls", [MiniHanabi, SimpleHanabi])
def test_prompt_examples_are_legal_forms(cls):
    g = cls()
    texts = [g.rules(p) for p in (0, 1)]
    for s in random_positions(g, range(2)):
        p = g.current_player(s)
        texts.append(g.observation(s, p, [(1 - p, a) for a in list(g.legal_actions(s))[:2]]))
    for text in texts:
        examples = [t for t in re.findall(r"<[^<>]*>", text) if t not in TAGS]
        assert examples and all(FORMS.fullmatch(t) for t in examples), examples
        assert "Discard Card" not in text
    assert "<answer><Play card 0></answer>" in texts[0]
    # the rules' reveal examples name a colour and a rank of this variant
    assert f"<Reveal player +1 color {g.colors[0]}>" in texts[0]
    assert f"<Reveal player +1 rank {g.ranks[0]}>" in texts[0]
