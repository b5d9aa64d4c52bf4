"""OpenSpiel games as adapters. Tic-Tac-Toe is the spine's game; later games subclass
`OpenSpielGame` the same way (rules text, observation, action strings)."""
from __future__ import annotations

import random

import pyspiel

from mars_core.games.base import GameAdapter


class OpenSpielGame(GameAdapter):
    """Shared OpenSpiel plumbing: seeded chance events, reward bookkeeping, action strings."""

    pyspiel_name: str = ""
    params: dict = {}

    def __init__(self) -> None:
        self.game = pyspiel.load_game(self.pyspiel_name, dict(self.params))
        self.num_players = self.game.num_players()

    # -- engine plumbing -------------------------------------------------------------------
    def new_state(self, seed: int):
        state = _Seeded(self.game.new_initial_state(), random.Random(seed))
        self._resolve_chance(state, [0.0] * self.num_players)
        return state

    def _resolve_chance(self, state: "_Seeded", acc: list[float]) -> None:
        while state.s.is_chance_node():
            actions, probs = zip(*state.s.chance_outcomes())
            state.s.apply_action(state.rng.choices(actions, weights=probs)[0])
            for i, r in enumerate(state.s.rewards()):
                acc[i] += r

    def current_player(self, state) -> int:
        return state.s.current_player()

    def is_terminal(self, state) -> bool:
        return state.s.is_terminal()

    def legal_actions(self, state) -> dict[str, int]:
        p = state.s.current_player()
        return {self.action_string(state, p, a): a for a in state.s.legal_actions(p)}

    def apply(self, state, action_id: int) -> list[float]:
        state.s.apply_action(action_id)
        rewards = list(state.s.rewards())
        self._resolve_chance(state, rewards)
        return rewards

    def returns(self, state) -> list[float]:
        return list(state.s.returns())

    def clone(self, state):
        return _Seeded(state.s.clone(), random.Random(state.rng.random()))

    def role(self, player: int) -> str:
        return f"player_{player}"

    def action_string(self, state, player: int, action_id: int) -> str:
        return f"<{state.s.action_to_string(player, action_id)}>"


class _Seeded:
    """A pyspiel state with its own random source for chance events."""

    __slots__ = ("s", "rng")

    def __init__(self, s, rng: random.Random) -> None:
        self.s, self.rng = s, rng


class TicTacToe(OpenSpielGame):
    name = "tic_tac_toe"
    pyspiel_name = "tic_tac_toe"
    MARKS = ("X", "O")

    def action_string(self, state, player: int, action_id: int) -> str:
        row, col = divmod(action_id, 3)
        return f"<{self.MARKS[player]}({row},{col})>"

    def board(self, state) -> str:
        rows = str(state.s).strip().splitlines()
        return "\n".join(" ".join("_" if c == "." else c.upper() for c in r) for r in rows)

    def rules(self, player: int) -> str:
        me, other = self.MARKS[player], self.MARKS[1 - player]
        order = "You move first." if player == 0 else "Your opponent moves first."
        return (
            f"You are playing Tic-Tac-Toe as {me}; your opponent plays {other}. {order}\n"
            "The board is a 3x3 grid. Players take turns placing their mark in an empty cell "
            "(shown as _). The first player with three marks in a row, column or diagonal wins; "
            "a full board with no such line is a draw.\n"
            "Cells are named (row,col) with row and col from 0 to 2; row 0 is the top row and "
            "column 0 the left column. An action is written with your mark, for example "
            f"<{me}(1,1)> places {me} in the centre.\n"
            "Reply with your reasoning if you like, then exactly one legal action inside answer "
            f"tags, for example <answer><{me}(0,2)></answer>, and nothing after it. An illegal "
            "or malformed answer loses the game."
        )

    def observation(self, state, player: int, moves_since: list[tuple[int, str]]) -> str:
        lines = [f"Opponent ({self.MARKS[p]}) played {a}." for p, a in moves_since]
        lines += [
            "Current board:",
            self.board(state),
            f"You are {self.MARKS[player]}. Legal actions: "
            + ", ".join(self.legal_actions(state)),
            "Answer with exactly one of them inside <answer></answer> tags.",
        ]
        return "\n".join(lines)

    def forfeit_return(self, state, player: int) -> float:
        return -1.0


GAMES: dict[str, type[GameAdapter]] = {"tic_tac_toe": TicTacToe}


def make_game(name: str) -> GameAdapter:
    """The adapter for a game name; unknown names list the valid ones."""
    if name not in GAMES:
        raise ValueError(f"unknown game {name!r}; choose one of: {', '.join(sorted(GAMES))}")
    return GAMES[name]()
