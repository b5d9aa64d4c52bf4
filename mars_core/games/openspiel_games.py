"""The OpenSpiel plumbing every game adapter shares (seeded chance events, rewards,
returns). Each game subclasses `OpenSpielGame` with its rules text, observation and action
strings: board games in `board_games`, poker in `poker`, Hanabi in `hanabi`."""
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
        self.perfect_information = (self.game.get_type().information
                                    == pyspiel.GameType.Information.PERFECT_INFORMATION)

    # -- engine plumbing -------------------------------------------------------------------
    def new_state(self, seed: int):
        state = _Seeded(self.game.new_initial_state(), random.Random(seed))
        self._resolve_chance(state)
        return state

    def _resolve_chance(self, state: "_Seeded") -> None:
        while state.s.is_chance_node():
            actions, probs = zip(*state.s.chance_outcomes())
            state.s.apply_action(state.rng.choices(actions, weights=probs)[0])

    def current_player(self, state) -> int:
        return state.s.current_player()

    def is_terminal(self, state) -> bool:
        return state.s.is_terminal()

    def legal_actions(self, state) -> dict[str, int]:
        p = state.s.current_player()
        return {self.action_string(state, p, a): a for a in state.s.legal_actions(p)}

    def apply(self, state, action_id: int) -> list[float]:
        """Step rewards as the change in returns over the action and the chance events after
        it (a card drawn, a public card dealt). Summing `rewards()` instead would count a
        Hanabi play twice: OpenSpiel keeps reporting it through the draw that follows."""
        before = state.s.returns()
        state.s.apply_action(action_id)
        self._resolve_chance(state)
        return [a - b for a, b in zip(state.s.returns(), before)]

    def returns(self, state) -> list[float]:
        return list(state.s.returns())

    def clone(self, state):
        return _Seeded(state.s.clone(), random.Random(state.rng.random()))

    def utility_range(self) -> tuple[float, float]:
        return self.game.min_utility(), self.game.max_utility()

    def role(self, player: int) -> str:
        return f"player_{player}"

    def action_string(self, state, player: int, action_id: int) -> str:
        return f"<{state.s.action_to_string(player, action_id)}>"


class _Seeded:
    """A pyspiel state with its own random source for chance events."""

    __slots__ = ("s", "rng")

    def __init__(self, s, rng: random.Random) -> None:
        self.s, self.rng = s, rng
