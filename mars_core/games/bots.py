"""Fixed opponents as policies: `bot:random` and `bot:mcts-N` (OpenSpiel's MCTS with UCT c=2
and a random-rollout evaluator of 10 rollouts, as in MARS's evaluation)."""
from __future__ import annotations

import random
import re

import numpy as np

from mars_core.games.base import GameAdapter

_MCTS = re.compile(r"^bot:mcts-(\d+)$")
BOT_SPECS = ("bot:random", "bot:mcts-N")


def is_bot(spec: str) -> bool:
    return spec.startswith("bot:")


def check_bot_spec(spec: str) -> None:
    """Raise ValueError naming the valid bot specs for an unknown one."""
    if spec == "bot:random" or _MCTS.match(spec):
        return
    raise ValueError(f"unknown opponent {spec!r}; choose one of: {', '.join(BOT_SPECS)}")


class RandomBot:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, adapter: GameAdapter, state) -> int:
        return self.rng.choice(sorted(adapter.legal_actions(state).values()))


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
    return MCTSBot(adapter, int(_MCTS.match(spec).group(1)), seed)
