"""The Kuhn and Leduc poker adapters: action strings, what each seat sees, chips and rewards."""
import random
import re

import pytest

from mars_core.games.base import parse_reply
from mars_core.games.openspiel_games import _Seeded
from mars_core.games.poker import KuhnPoker, LeducPoker
from mars_core.games.registry import make_game

# An action-looking token in prompt text: anything in angle brackets but the answer tags.
TOKEN = re.compile(r"<(?!/?answer>)[^<>\s]+>")
CARD = re.compile(r"\b[JQK]\b")
J, Q, K = 0, 1, 2  # Kuhn card ids
LJ, LQ, LK = 0, 2, 4  # a Leduc card id of each rank (ids 2r and 2r+1 share rank r)


class _Deck:
    """A stand-in random source that deals the given chance outcomes in order."""

    def __init__(self, cards):
        self.cards = list(cards)

    def choices(self, actions, weights):
        card = self.cards.pop(0)
        assert card in actions
        return [card]


def dealt(g, cards):
    """A game whose chance events (private cards, then Leduc's public card) are `cards`."""
    state = _Seeded(g.game.new_initial_state(), _Deck(cards))
    g._resolve_chance(state)
    return state


def play(g, state, actions):
    """Apply our action strings in order; return each step's rewards."""
    return [g.apply(state, g.legal_actions(state)[a]) for a in actions]


def random_positions(g, games=40):
    """Every (state clone, player to move) of random games, for whole-game checks."""
    rng = random.Random(0)
    for seed in range(games):
        s = g.new_state(seed)
        while not g.is_terminal(s):
            yield g.clone(s), g.current_player(s)
            g.apply(s, rng.choice(sorted(g.legal_actions(s).values())))


def test_registry_builds_both_games():
    assert isinstance(make_game("kuhn_poker"), KuhnPoker)
    assert isinstance(make_game("leduc_poker"), LeducPoker)
    for g in (KuhnPoker(), LeducPoker()):
        assert g.num_players == 2 and not g.draw_bonus and g.role(1) == "player_1"


@pytest.mark.parametrize("cls,names", [
    (KuhnPoker, {0: "Pass", 1: "Bet"}), (LeducPoker, {0: "Fold", 1: "Call", 2: "Raise"}),
])
def test_action_strings_follow_openspiel_ids(cls, names):
    g = cls()
    s = g.new_state(0)
    for aid, name in names.items():
        assert s.s.action_to_string(0, aid) == name
        assert g.action_string(s, 0, aid) == f"<{name.upper()}>"
    legal = g.legal_actions(s)
    for action, aid in legal.items():
        assert parse_reply(f"<answer>{action}</answer>", set(legal)).action == action
        assert g.action_string(s, 0, aid) == action


def test_leduc_lists_only_legal_actions():
    g = LeducPoker()
    s = dealt(g, [LK, LJ])
    assert list(g.legal_actions(s)) == ["<CALL>", "<RAISE>"]  # nothing to fold against
    play(g, s, ["<RAISE>"])
    assert list(g.legal_actions(s)) == ["<FOLD>", "<CALL>", "<RAISE>"]
    play(g, s, ["<RAISE>"])
    assert list(g.legal_actions(s)) == ["<FOLD>", "<CALL>"]  # two raises: the cap


def test_kuhn_bet_then_fold_pays_the_bettor():
    g = KuhnPoker()
    s = dealt(g, [J, K])
    assert play(g, s, ["<BET>", "<PASS>"]) == [[0.0, 0.0], [1.0, -1.0]]
    assert g.is_terminal(s)


@pytest.mark.parametrize("line,returns", [
    (["<PASS>", "<PASS>"], [-1.0, 1.0]),
    (["<BET>", "<BET>"], [-2.0, 2.0]),
    (["<PASS>", "<BET>", "<BET>"], [-2.0, 2.0]),
    (["<PASS>", "<BET>", "<PASS>"], [-1.0, 1.0]),
])
def test_kuhn_showdowns_and_folds(line, returns):
    g = KuhnPoker()
    s = dealt(g, [Q, K])
    assert play(g, s, line)[-1] == returns and g.returns(s) == returns


def test_leduc_pair_with_public_card_wins_showdown():
    g = LeducPoker()
    s = dealt(g, [LK, LJ, LJ + 1])  # p0 K, p1 J, public J: p1 has a pair
    rewards = play(g, s, ["<RAISE>", "<CALL>", "<RAISE>", "<CALL>"])
    assert rewards[:-1] == [[0.0, 0.0]] * 3 and rewards[-1] == [-7.0, 7.0]  # 1 + 2 + 4 each
    assert g.is_terminal(s)


def test_leduc_higher_card_wins_and_equal_ranks_split():
    g = LeducPoker()
    s = dealt(g, [LQ, LK, LJ])
    assert play(g, s, ["<CALL>", "<CALL>", "<CALL>", "<CALL>"])[-1] == [-1.0, 1.0]
    s = dealt(g, [LQ, LQ + 1, LK])
    assert play(g, s, ["<CALL>", "<RAISE>", "<CALL>", "<CALL>", "<CALL>"])[-1] == [0.0, 0.0]


def test_leduc_fold_in_round_two():
    g = LeducPoker()
    s = dealt(g, [LK, LQ, LJ])
    assert play(g, s, ["<CALL>", "<RAISE>", "<RAISE>", "<CALL>", "<RAISE>", "<FOLD>"])[-1] \
        == [5.0, -5.0]


def test_kuhn_observation_shows_own_card_history_and_chips():
    g = KuhnPoker()
    s = dealt(g, [K, J])
    assert g.observation(s, 0, []) == (
        "Your private card: K\nBetting: none yet\nChips in the pot: you 1, opponent 1.\n"
        "Legal actions: <PASS>, <BET>\n"
        "Answer with exactly one of them inside <answer></answer> tags.")
    play(g, s, ["<PASS>", "<BET>"])
    obs = g.observation(s, 0, [(1, "<BET>")])
    assert obs.startswith("Opponent played <BET>.\nYour private card: K\n")
    assert "Betting: you <PASS>, opponent <BET>\nChips in the pot: you 1, opponent 2. To call " \
        "you must put in 1 more.\nLegal actions: <PASS>, <BET>\n" in obs


def test_leduc_public_card_appears_only_once_dealt():
    g = LeducPoker()
    s = dealt(g, [LQ, LJ, LK])
    obs = g.observation(s, 0, [])
    assert "Public card: not dealt yet" in obs and CARD.findall(obs) == ["Q"]
    assert "Round 1 betting: none yet" in obs and "Round 2" not in obs
    play(g, s, ["<RAISE>"])
    obs = g.observation(s, 1, [(0, "<RAISE>")])
    assert CARD.findall(obs) == ["J"] and "Chips in the pot: you 1, opponent 3." in obs
    play(g, s, ["<CALL>"])
    obs = g.observation(s, 0, [(1, "<CALL>")])
    assert "Your private card: Q\nPublic card: K\n" in obs
    assert "Round 1 betting: you <RAISE>, opponent <CALL>\nRound 2 betting: none yet" in obs
    assert "Chips in the pot: you 3, opponent 3." in obs


def true_cards(g, s):
    """(public rank or None, p0 rank, p1 rank) from the full engine state, for checking."""
    if isinstance(g, KuhnPoker):
        return (None, *("JQK"[c] for c in s.s.history()[:2]))
    line = re.search(r"Cards \(public player_0 player_1\): (-?\d+) (\d+) (\d+)", str(s.s))
    public, *private = (int(x) for x in line.groups())
    return ("JQK"[public // 2] if public >= 0 else None, *("JQK"[c // 2] for c in private))


@pytest.mark.parametrize("cls", [KuhnPoker, LeducPoker])
def test_no_seat_ever_sees_the_opponents_card(cls):
    g = cls()
    for s, p in random_positions(g):
        public, *private = true_cards(g, s)
        for seat in (0, 1):
            obs = g.observation(s, seat, [])
            assert f"Your private card: {private[seat]}\n" in obs
            assert set(CARD.findall(obs)) <= {private[seat], public}
            if public is not None:
                assert f"Public card: {public}\n" in obs
        assert "Your private card" not in g.rules(p)


def test_forfeit_loses_the_chips_put_in():
    g = KuhnPoker()
    s = dealt(g, [J, Q])
    assert g.forfeit_return(s, 0) == g.forfeit_return(s, 1) == -1.0
    play(g, s, ["<BET>"])
    assert (g.forfeit_return(s, 0), g.forfeit_return(s, 1)) == (-2.0, -1.0)
    g = LeducPoker()
    s = dealt(g, [LJ, LQ, LK])
    assert g.forfeit_return(s, 0) == -1.0
    play(g, s, ["<RAISE>", "<RAISE>"])
    assert (g.forfeit_return(s, 0), g.forfeit_return(s, 1)) == (-3.0, -5.0)
    play(g, s, ["<CALL>", "<RAISE>"])
    assert (g.forfeit_return(s, 0), g.forfeit_return(s, 1)) == (-9.0, -5.0)


@pytest.mark.parametrize("cls,example", [(KuhnPoker, "<BET>"), (LeducPoker, "<CALL>")])
def test_prompt_examples_are_legal_looking(cls, example):
    g = cls()
    legal_sets, texts = [], [g.rules(0), g.rules(1)]
    for s, p in random_positions(g, games=20):
        legal_sets.append(set(g.legal_actions(s)))
        texts.append(g.observation(s, p, [(1 - p, "<CALL>")] if cls is LeducPoker else []))
    for p in (0, 1):
        assert f"<answer>{example}</answer>" in g.rules(p)
    assert all(example in legal for legal in legal_sets)  # the example is always legal
    tokens = {t for text in texts for t in TOKEN.findall(text)}
    assert tokens == set().union(*legal_sets)
    for t in tokens:
        assert any(parse_reply(f"<answer>{t}</answer>", legal).action == t
                   for legal in legal_sets)


def test_adapters_hold_no_episode_state():
    for g in (KuhnPoker(), LeducPoker()):
        before = dict(vars(g))
        a, b = g.new_state(0), g.new_state(1)
        g.apply(a, 1)
        g.observation(b, 0, [])
        assert vars(g) == before and g.legal_actions(b)
