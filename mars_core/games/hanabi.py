"""Hanabi (OpenSpiel `hanabi`, two players): a cooperative game of hidden information.

Both seats share one score, so OpenSpiel gives every seat the same reward: +1 per card played
onto a firework, and minus the score so far when the last life token is lost (the score drops
to 0). The text shown to a seat is rebuilt from OpenSpiel's observation string, which hides the
observer's own cards (`XX`) and lists, per card, the colours and ranks the hints still allow.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pyspiel

from mars_core.games.openspiel_games import OpenSpielGame
from mars_core.vocab import Outcome

COLOR_NAMES = {"R": "red", "Y": "yellow", "G": "green", "W": "white", "B": "blue"}
_PLAY_OR_DISCARD = re.compile(r"^\((Play|Discard) (\d+)\)$")
_REVEAL = re.compile(r"^\((Reveal player \+1 (?:color [A-Z]|rank \d+))\)$")


@dataclass(frozen=True)
class _Card:
    identity: str  # e.g. "R1"; "XX" when the viewer cannot see it (its own hand)
    colors: str  # the colours the hints still allow, e.g. "RY"
    ranks: str  # the ranks the hints still allow, e.g. "12"


@dataclass(frozen=True)
class _View:
    """One seat's view, parsed from `state.observation_string(player)`."""

    life: int
    info: int
    fireworks: list[tuple[str, int]]  # (colour, top rank played; 0 = none)
    hands: list[list[_Card]]  # the viewer's own hand first, then the next seats' hands
    deck: int
    discards: list[str]


def _field(lines: list[str], prefix: str) -> str:
    return next(line[len(prefix):].strip() for line in lines if line.startswith(prefix))


def _parse_view(text: str) -> _View:
    """OpenSpiel prints hands in seat order from the viewer, split by `-----`, one card a line
    as `R1 || RX|R12` (identity || hinted colour+rank | colours+ranks still possible)."""
    lines = [line.strip() for line in text.splitlines()]
    hands: list[list[_Card]] = [[]]
    for line in lines[lines.index("Hands:") + 1:]:
        if line.startswith("Deck size:"):
            break
        if line == "-----":
            hands.append([])
        elif "||" in line:
            identity, _, knowledge = line.partition("||")
            possible = knowledge.partition("|")[2]
            hands[-1].append(_Card(identity.strip(), "".join(c for c in possible if c.isalpha()),
                                   "".join(c for c in possible if c.isdigit())))
    fireworks = [(t[0], int(t[1:])) for t in _field(lines, "Fireworks:").split()]
    return _View(int(_field(lines, "Life tokens:")), int(_field(lines, "Info tokens:")),
                 fireworks, hands, int(_field(lines, "Deck size:")),
                 _field(lines, "Discards:").split())


def _deck_counts(game) -> dict[str, int]:
    """Card ("R1") -> copies in the deck, read off OpenSpiel itself: the first deal's
    probabilities are copies / deck size, and the deck size is the cards dealt plus the rest."""
    state = game.new_initial_state()
    first = state.chance_outcomes()
    names = {a: state.action_to_string(pyspiel.PlayerId.CHANCE, a)[len("(Deal "):-1]
             for a, _ in first}
    while state.is_chance_node():
        state.apply_action(state.chance_outcomes()[0][0])
    view = _parse_view(state.observation_string(0))
    total = view.deck + sum(len(hand) for hand in view.hands)
    return {names[a]: round(p * total) for a, p in first}


def _knowledge(card: _Card, colors: str, ranks: str) -> str:
    """What the hints say about a card: one value when known, alternatives when narrowed."""
    def part(kind: str, possible: str, every: str) -> str:
        if len(possible) == len(every):
            return f"{kind} ?"
        return f"{kind} " + " or ".join(possible)
    return f"{part('color', card.colors, colors)}, {part('rank', card.ranks, ranks)}"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


class _Hanabi(OpenSpielGame):
    """Shared by both variants; a subclass only names itself and sets OpenSpiel's params."""

    pyspiel_name = "hanabi"
    cooperative = True
    draw_bonus = False

    def __init__(self) -> None:
        super().__init__()
        self.deck = _deck_counts(self.game)
        self.colors = "".join(dict.fromkeys(card[0] for card in self.deck))
        self.ranks = "".join(dict.fromkeys(card[1:] for card in self.deck))
        self.max_score = int(self.game.max_utility())

    # -- engine plumbing -------------------------------------------------------------------
    def action_string(self, state, player: int, action_id: int) -> str:
        """`(Play 0)` -> `<Play card 0>`, `(Reveal player +1 color R)` -> same in brackets."""
        text = state.s.action_to_string(player, action_id)
        move = _PLAY_OR_DISCARD.match(text)
        if move:
            return f"<{move.group(1)} card {move.group(2)}>"
        reveal = _REVEAL.match(text)
        if reveal:
            return f"<{reveal.group(1)}>"
        raise ValueError(f"unexpected hanabi action {text!r}")

    def forfeit_return(self, state, player: int) -> float:
        """An invalid reply loses every point scored so far, as losing the last life does."""
        return 0.0

    def outcome(self, returns: list[float], player: int) -> str:
        """Cooperative: "win" only for the maximum score (every firework complete), "loss" for
        a score of 0 (nothing played, or the last life lost), and "draw" for a partial score,
        which is neither a win nor a loss."""
        score = returns[player]
        if score >= self.max_score - 1e-9:
            return Outcome.WIN
        return Outcome.LOSS if score <= 1e-9 else Outcome.DRAW

    # -- text ------------------------------------------------------------------------------
    def _cards_text(self) -> str:
        names = [f"{c} ({COLOR_NAMES.get(c, c)})" for c in self.colors]
        copies = [f"{n} cop{'y' if n == 1 else 'ies'} of rank {r}"
                  for r in self.ranks for n in [self.deck[self.colors[0] + r]]]
        return (f"Cards: {len(self.colors)} colours, {_join(names)}, with ranks "
                f"{_join(list(self.ranks))}. Each colour has {_join(copies)}: "
                f"{sum(self.deck.values())} cards in all. Each player holds "
                f"{self.params['hand_size']} cards.")

    def rules(self, player: int) -> str:
        p, info, life = self.params, self.params["max_information_tokens"], \
            self.params["max_life_tokens"]
        top, c0, r0 = self.ranks[-1], self.colors[0], self.ranks[0]
        order = "You move first." if player == 0 else "Your partner moves first."
        return (
            f"You are player {player} of {p['players']} in Hanabi, a cooperative card game: you "
            f"and your partner share one score and win or lose together. {order} Turns "
            "alternate.\n"
            f"{self._cards_text()} You see your partner's cards but not your own; you learn "
            "about your own cards only from your partner's hints.\n"
            "Goal: build one firework per colour by playing its cards in rank order "
            f"({', then '.join(self.ranks)}). The score is the number of cards on the "
            f"fireworks, at most {self.max_score} (every firework complete).\n"
            f"Tokens: you start with {info} information tokens (the maximum) and {life} life "
            "tokens. A hint uses one information token; discarding a card regains one, and "
            f"completing a firework (playing its rank {top}) regains one, never above {info}. "
            "Playing a card that does not fit its firework loses one life token. Losing the "
            "last life token ends the game and loses all points scored so far (score 0).\n"
            "The game ends when the deck runs out (each player then gets one more turn), when "
            "the last life token is lost, or when every firework is complete.\n"
            "Actions. Cards in a hand are numbered from 0; after a card is played or "
            "discarded, the cards after it move down one place and the newly drawn card goes "
            "last.\n"
            "- <Play card 0> plays your card 0: if it is the next rank of its colour's "
            "firework it is added (+1 point), otherwise it is discarded and you lose a life "
            "token. You then draw a card if the deck has any left.\n"
            "- <Discard card 1> discards your card 1, regains an information token and draws "
            "a card; it is not allowed while the information tokens are at the maximum.\n"
            f"- <Reveal player +1 color {c0}> tells your partner (the next player, +1) which "
            f"of their cards are {COLOR_NAMES.get(c0, c0)}; <Reveal player +1 rank {r0}> tells "
            f"them which of their cards have rank {r0}. A hint must point to at least one "
            "card in their hand and needs an information token.\n"
            "Each turn you see the tokens, the fireworks, the deck size, the discards, your "
            "partner's hand with what your partner knows about it, what you know about your "
            "own hand, and your legal actions.\n"
            "Reply with your reasoning if you like, then exactly one legal action inside "
            "answer tags, for example <answer><Play card 0></answer>, and nothing after it. "
            "An illegal or malformed answer ends the game and loses all points scored so far."
        )

    def _hand_lines(self, hand: list[_Card], own: bool) -> list[str]:
        who = "you know" if own else "partner knows"
        return [f"  card {i}: {'hidden' if own else c.identity} "
                f"({who}: {_knowledge(c, self.colors, self.ranks)})"
                for i, c in enumerate(hand)]

    def _fireworks_text(self, view: _View) -> str:
        tops = ", ".join(f"{c}{n}" for c, n in view.fireworks)
        need = ", ".join(f"{c} complete" if n >= len(self.ranks) else f"{c}{self.ranks[n]}"
                         for c, n in view.fireworks)
        score = sum(n for _, n in view.fireworks)
        return (f"Fireworks (top card per colour, 0 = none yet): {tops}. Next playable: "
                f"{need}. Score: {score} of {self.max_score}.")

    def observation(self, state, player: int, moves_since: list[tuple[int, str]]) -> str:
        view = _parse_view(state.s.observation_string(player))
        lines = [f"Partner played {a}." for _, a in moves_since]
        lines += [
            f"Life tokens: {view.life} of {self.params['max_life_tokens']}. Information "
            f"tokens: {view.info} of {self.params['max_information_tokens']}.",
            self._fireworks_text(view),
            f"Deck: {view.deck} card{'' if view.deck == 1 else 's'} left. Discards: "
            f"{' '.join(view.discards) or 'none'}.",
            "Partner's hand:", *self._hand_lines(view.hands[1], own=False),
            "Your hand:", *self._hand_lines(view.hands[0], own=True),
            "Legal actions: " + ", ".join(self.legal_actions(state)),
            "Answer with exactly one of them inside <answer></answer> tags.",
        ]
        return "\n".join(lines)


class MiniHanabi(_Hanabi):
    name = "mini_hanabi"
    params = dict(players=2, colors=2, ranks=2, hand_size=3, max_information_tokens=3,
                  max_life_tokens=3)


class SimpleHanabi(_Hanabi):
    name = "simple_hanabi"
    params = dict(players=2, colors=3, ranks=2, hand_size=5, max_information_tokens=8,
                  max_life_tokens=3)
