"""The games by name: the six MARS (OpenSpiel) games and the four MindGames (TextArena) ones.
The names live in `catalog.py` (a leaf: config validation and `--games` checks read it without
building anything); adapter classes are imported on first use, and adapters are built once and
shared: they hold no per-episode state."""
from __future__ import annotations

import importlib
from functools import lru_cache

from mars_core.games.base import GameAdapter
from mars_core.games.catalog import GAMES, check_game


def game_class(name: str) -> type[GameAdapter]:
    check_game(name)
    module, cls = GAMES[name]
    return getattr(importlib.import_module(module), cls)


@lru_cache(maxsize=None)
def make_game(name: str) -> GameAdapter:
    """The (shared, stateless) adapter for a game name; unknown names list the valid ones."""
    return game_class(name)()
