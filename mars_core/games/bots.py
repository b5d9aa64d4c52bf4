"""Fixed opponents as policies, and which of them fit which game.

- `bot:random`: a uniformly random legal action (every game);
- `bot:mcts-N`: OpenSpiel's MCTS with N simulations, UCT c=2 and a random-rollout evaluator of
  10 rollouts, as in MARS's evaluation. It searches the true game state, so it is only fair in
  perfect-information games (Tic-Tac-Toe, Connect Four): on poker it would see the cards;
- `bot:nash`: a Nash-equilibrium policy from CFR, stored as JSON (Kuhn and Leduc poker);
- game-specific bots (`GAME_BOTS`): `bot:blotto-focus` (Colonel Blotto), `bot:tit-for-tat`
  and `bot:always-defect` (Three-Player IPD);
- `self` (an opponent only): the evaluated policy itself takes every other seat: Hanabi's
  partner, and plain self-play in any game.
"""
from __future__ import annotations

import importlib
import random
import re

import numpy as np

from mars_core.games.base import GameAdapter
from mars_core.games.registry import make_game

_MCTS = re.compile(r"^bot:mcts-([1-9]\d*)$")
SELF = "self"
NASH_GAMES = ("kuhn_poker", "leduc_poker")  # the games with a stored Nash policy (games/nash.py)
# spec -> (the one game it plays, "module:Class" built with a seed)
GAME_BOTS: dict[str, tuple[str, str]] = {
    "bot:blotto-focus": ("colonel_blotto", "mars_core.games.blotto:FocusBot"),
    "bot:tit-for-tat": ("three_player_ipd", "mars_core.games.ipd:TitForTatBot"),
    "bot:always-defect": ("three_player_ipd", "mars_core.games.ipd:AlwaysDefectBot"),
}
BOT_SPECS = ("bot:random", "bot:mcts-N", "bot:nash", *GAME_BOTS)
OPPONENT_SPECS = (*BOT_SPECS, SELF)


def is_bot(spec: str) -> bool:
    return spec.startswith("bot:")


def check_bot_spec(spec: str) -> None:
    """Raise ValueError naming the valid bot specs for an unknown one."""
    if spec in ("bot:random", "bot:nash") or spec in GAME_BOTS or _MCTS.match(spec):
        return
    raise ValueError(f"unknown bot {spec!r}; choose one of: {', '.join(BOT_SPECS)} "
                     "(N = number of simulations)")


def check_opponent(spec: str, game: str) -> None:
    """Raise ValueError when `spec` is no opponent, or one that does not fit `game`."""
    if spec != SELF and not is_bot(spec):
        raise ValueError(f"unknown opponent {spec!r}; choose one of: {', '.join(OPPONENT_SPECS)}")
    if spec == SELF:
        return
    check_bot_spec(spec)
    adapter = make_game(game)
    if adapter.cooperative and spec != "bot:random":
        raise ValueError(f"opponent {spec!r} does not fit {game}: the partner in a cooperative "
                         f"game is the policy itself ({SELF!r}) or bot:random")
    if spec in GAME_BOTS and GAME_BOTS[spec][0] != game:
        raise ValueError(f"opponent {spec!r} does not fit {game}: it plays {GAME_BOTS[spec][0]}")
    if spec == "bot:nash" and game not in NASH_GAMES:
        raise ValueError(f"opponent 'bot:nash' does not fit {game}: Nash policies exist for "
                         f"{', '.join(NASH_GAMES)}")
    if _MCTS.match(spec) and not adapter.perfect_information:
        raise ValueError(f"opponent {spec!r} does not fit {game}: MCTS searches the true state, "
                         "so in a game with hidden information it would see what is hidden")


class RandomBot:
    """A uniformly random valid action (the adapter knows what is valid)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, adapter: GameAdapter, state) -> str:
        return adapter.random_action(state, self.rng)


class MCTSBot:
    """OpenSpiel's MCTS bot on the adapter's underlying pyspiel state."""

    def __init__(self, adapter: GameAdapter, simulations: int, seed: int) -> None:
        from open_spiel.python.algorithms import mcts

        rng = np.random.RandomState(seed)
        evaluator = mcts.RandomRolloutEvaluator(n_rollouts=10, random_state=rng)
        self.bot = mcts.MCTSBot(adapter.game, uct_c=2.0, max_simulations=simulations,
                                evaluator=evaluator, random_state=rng)

    def act(self, adapter: GameAdapter, state) -> int:
        return self.bot.step(state.s)


def make_bot(spec: str, adapter: GameAdapter, seed: int):
    check_bot_spec(spec)
    if spec == "bot:random":
        return RandomBot(seed)
    if spec in GAME_BOTS:
        module, cls = GAME_BOTS[spec][1].split(":")
        return getattr(importlib.import_module(module), cls)(seed)
    if spec == "bot:nash":
        from mars_core.games.nash import NashBot

        return NashBot(adapter.name, seed)
    return MCTSBot(adapter, int(_MCTS.match(spec).group(1)), seed)
