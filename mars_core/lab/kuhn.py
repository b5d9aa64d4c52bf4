"""Kuhn Poker exactly: its 12 information states, the prompts a seat sees in each, the exact
action values of any pair of policies, and the best response to `bot:random`.

Kuhn is small enough to compute everything the learning lab compares against: a policy is a
probability of <BET> per information state (`InfoState.key`, "J", "Qp", "Kb", "Jpb", ...), and
`action_values` gives, for every information state of a seat, the expected final return of
each action when both seats then play their policies (the opponent's card weighted by how
likely the opponent's own policy made the history). The lab's capacity probe fits the best
response; the tests check the per-state baseline against these values.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache

ACTIONS = ("<PASS>", "<BET>")  # OpenSpiel's action ids 0 and 1
RANKS = ("J", "Q", "K")
# the betting histories at which each seat decides (p: pass, b: bet)
HISTORIES = {0: ("", "pb"), 1: ("p", "b")}


@dataclass(frozen=True)
class InfoState:
    """A decision of Kuhn Poker as its seat knows it: the seat, its card (0 J, 1 Q, 2 K) and
    the betting so far."""

    player: int
    card: int
    history: str

    @property
    def key(self) -> str:
        return RANKS[self.card] + self.history

    @property
    def facing_bet(self) -> bool:
        return self.history.endswith("b")


def info_states() -> list[InfoState]:
    """The 12 information states: each seat's decision points x its three cards."""
    return [InfoState(p, c, h) for p in (0, 1) for h in HISTORIES[p] for c in range(3)]


@cache
def _kuhn():
    import pyspiel

    return pyspiel.load_game("kuhn_poker")


def deal(cards: tuple[int, int], history: str = ""):
    """A pyspiel Kuhn state with seat 0 holding cards[0], seat 1 cards[1], after `history`."""
    s = _kuhn().new_initial_state()
    s.apply_action(cards[0])
    s.apply_action(cards[1])
    for c in history:
        s.apply_action("pb".index(c))
    return s


def prompt_texts(adapter, info: InfoState, style: str) -> tuple[str, str]:
    """(system message, observation) the seat is shown in `info` in the layout `style`, as
    `play_episodes` shows them without history (the opponent's card does not enter them)."""
    from mars_core.games.openspiel_games import _Seeded

    other = next(c for c in range(3) if c != info.card)
    cards = (info.card, other) if info.player == 0 else (other, info.card)
    state = _Seeded(deal(cards, info.history), random.Random(0))
    # the opponent's moves since this seat last moved (or since the deal)
    since = info.history[-1:] if info.history else ""
    moves = [(1 - info.player, ACTIONS["pb".index(c)]) for c in since]
    return (adapter.rules_for(info.player, style),
            adapter.observation_for(state, info.player, moves, style))


Policy = dict[str, float]  # InfoState.key -> probability of <BET>

UNIFORM: Policy = {i.key: 0.5 for i in info_states()}


def _value(s, me: int, mine: Policy, theirs: Policy, history: str) -> float:
    if s.is_terminal():
        return s.returns()[me]
    p = s.current_player()
    card = int(s.information_state_string(p)[0])
    bet = (mine if p == me else theirs)[RANKS[card] + history]
    total = 0.0
    for a, prob in ((0, 1 - bet), (1, bet)):
        if prob:
            child = s.clone()
            child.apply_action(a)
            total += prob * _value(child, me, mine, theirs, history + "pb"[a])
    return total


def _reach(theirs: Policy, opp: int, opp_card: int, history: str) -> float:
    """The probability that the opponent's own moves in `history` were played."""
    prob = 1.0
    for k, c in enumerate(history):
        if k % 2 == opp:
            bet = theirs[RANKS[opp_card] + history[:k]]
            prob *= bet if c == "b" else 1 - bet
    return prob


def action_values(mine: Policy, theirs: Policy) -> dict[str, tuple[float, float]]:
    """For every information state of a seat playing `mine` against `theirs`: the expected
    final return of <PASS> and of <BET> there (both seats then playing their policies), the
    opponent's card weighted by its reach under `theirs` (cards are dealt uniformly)."""
    out = {}
    for info in info_states():
        opp = 1 - info.player
        weights, q = [], [0.0, 0.0]
        for oc in (c for c in range(3) if c != info.card):
            w = _reach(theirs, opp, oc, info.history)
            cards = (info.card, oc) if info.player == 0 else (oc, info.card)
            weights.append(w)
            for a in (0, 1):
                s = deal(cards, info.history)
                s.apply_action(a)
                q[a] += w * _value(s, info.player, mine, theirs, info.history + "pb"[a])
        total = sum(weights)
        out[info.key] = (q[0] / total, q[1] / total) if total else (0.0, 0.0)
    return out


def state_value(mine: Policy, q: dict[str, tuple[float, float]]) -> dict[str, float]:
    """V(I) = sum over actions of pi(a | I) Q(I, a)."""
    return {k: (1 - mine[k]) * q0 + mine[k] * q1 for k, (q0, q1) in q.items()}


def normalized_value(mine: Policy, theirs: Policy = UNIFORM) -> float:
    """The exact expected normalized return (0-100; Kuhn's returns run from -2 to +2 chips) of
    `mine` against `theirs`, each seat half the time: the best response to bot:random scores
    61.46 (0.458 chips a hand), always betting 59.38 (0.375). A policy read from play gives
    its unvisited states any value: a state it never reaches weighs nothing."""
    v = state_value(mine, action_values(mine, theirs))
    chips = (sum(v[c] for c in "JQK") / 3 + sum(v[c + "p"] + v[c + "b"] for c in "JQK") / 6) / 2
    return (chips + 2) / 4 * 100


def best_response(theirs: Policy = UNIFORM) -> Policy:
    """The deterministic best response to `theirs` (ties go to <BET>): found by improving a
    uniform policy until it stops changing (Kuhn's seats decide at most twice)."""
    mine = dict(UNIFORM)
    for _ in range(4):
        q = action_values(mine, theirs)
        nxt = {k: float(q1 >= q0) for k, (q0, q1) in q.items()}
        if nxt == mine:
            break
        mine = nxt
    return mine


def reach(mine: Policy, theirs: Policy) -> dict[str, float]:
    """How often a hand played in the information state's seat passes through it (cards dealt
    uniformly, both seats playing their policies)."""
    out = {}
    for info in info_states():
        opp, total = 1 - info.player, 0.0
        for oc in (c for c in range(3) if c != info.card):
            prob = 1 / 6
            for k, c in enumerate(info.history):
                who, card = (theirs, oc) if k % 2 == opp else (mine, info.card)
                bet = who[RANKS[card] + info.history[:k]]
                prob *= bet if c == "b" else 1 - bet
            total += prob
        out[info.key] = total
    return out


def update_signal(mine: Policy, theirs: Policy = UNIFORM) -> dict[str, dict[str, float]]:
    """What an update is told in each information state, in expectation: the policy-gradient
    push on the state's <BET> logit z per visit, p (1 - p) (Q(bet) - Q(pass)) with exact
    advantages (a baseline per state); the same with the state's advantages divided by their
    std (`normalize_std`), sign(Q(bet) - Q(pass)) sqrt(p (1 - p)); the supervised push toward
    the best response, target - p (the capacity probe's); and how often a hand visits the
    state. For the learning lab's signal table (docs/lab.md)."""
    q, br, visits = action_values(mine, theirs), best_response(theirs), reach(mine, theirs)
    out = {}
    for key, (q0, q1) in q.items():
        p, gap = mine[key], q1 - q0
        spread, sign = p * (1 - p), (gap > 0) - (gap < 0)
        out[key] = {"q_pass": q0, "q_bet": q1, "p_bet": p, "reach": visits[key],
                    "pg": spread * gap,
                    "pg_normalized": sign * spread ** 0.5,
                    "supervised": br[key] - p}
    return out


_CARD = re.compile(r"^Your (?:private )?card: ([JQK])$", re.M)
_BETS = re.compile(r"^(?:Betting|Bets): (.*)$", re.M)
_LEGAL = re.compile(r"^Legal(?: actions)?: (.*)$", re.M)


def read_decision(observation: str) -> tuple[str, str, tuple[str, ...]] | None:
    """(card, betting history in p/b, legal actions) read back from a Kuhn observation in
    either layout, or None when it is not one (another game's, or unreadable)."""
    card, bets, legal = (r.search(observation) for r in (_CARD, _BETS, _LEGAL))
    if not (card and bets and legal):
        return None
    moves = [] if bets[1].strip() in ("none", "none yet") else bets[1].split(", ")
    history = "".join("b" if m.endswith("<BET>") else "p" for m in moves)
    return card[1], history, tuple(re.findall(r"<[A-Z]+>", legal[1]))
