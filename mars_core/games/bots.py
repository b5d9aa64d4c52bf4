"""Fixed opponents as policies, and which of them fit which game.

- `bot:random`: a uniformly random legal action (every game);
- `bot:mcts-N`: OpenSpiel's MCTS with N simulations, UCT c=2 and a random-rollout evaluator of
  10 rollouts, as in MARS's evaluation. It searches the true game state, so it is only fair in
  perfect-information games (Tic-Tac-Toe, Connect Four): on poker it would see the cards;
- `bot:nash`: a Nash-equilibrium policy from CFR, stored as JSON (Kuhn and Leduc poker);
- game-specific bots (`GAME_BOTS`): `bot:blotto-focus` and `bot:blotto-mix` (Colonel
  Blotto), `bot:tit-for-tat` and `bot:always-defect` (Three-Player IPD);
- `self` (an opponent only): the evaluated policy itself takes every other seat: Hanabi's
  partner, and plain self-play in any game.

The specs and which game each fits live in `opponents.py` (a leaf, for config validation), a
game's own bots in its record (`catalog.py`); this module builds the bots.
"""
from __future__ import annotations

import random

import numpy as np

from mars_core.games.base import GameAdapter
from mars_core.games.catalog import CATALOG
from mars_core.games.opponents import GAME_BOTS, MCTS, check_bot_spec

# the game-specific bots by spec, from the games' records (which game each plays:
# `opponents.GAME_BOTS`); their modules, the games' own, are imported here
GAME_BOT_CLASSES: dict[str, type] = {spec: cls() for g in CATALOG for spec, cls in g.bots}
assert set(GAME_BOT_CLASSES) == set(GAME_BOTS), "every game bot has its class"


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

        # numpy takes seeds below 2**32; the plays' seeds (a stream seed + the game, times
        # 1000, + the seat) pass it from iteration 5 of a run on (seed 0), or at once
        rng = np.random.RandomState(seed % 2**32)
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
        return GAME_BOT_CLASSES[spec](seed)
    if spec == "bot:nash":
        from mars_core.games.nash import NashBot

        return NashBot(adapter.name, seed)
    return MCTSBot(adapter, int(MCTS.match(spec).group(1)), seed)
