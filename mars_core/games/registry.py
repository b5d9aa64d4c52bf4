"""The games' adapters by name, read from the catalog's records (`catalog.CATALOG`): each class
is imported on first use (the game's engine loads then, not when a config is checked), and
adapters are built once and shared: they hold no per-episode state."""
from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from mars_core.games.base import GameAdapter
from mars_core.games.catalog import CATALOG, GAMES, record

# name -> its adapter class, imported when called, in the catalog's order
ADAPTERS: dict[str, Callable[[], type[GameAdapter]]] = {g.name: g.adapter for g in CATALOG}
assert tuple(ADAPTERS) == GAMES, "the registry and the catalog name the same games"


def game_class(name: str) -> type[GameAdapter]:
    """The adapter class of a catalog game, or of an engine's game named `<family>:<name>`."""
    return record(name).adapter()


@lru_cache(maxsize=None)
def make_game(name: str) -> GameAdapter:
    """The (shared, stateless) adapter for a game name; unknown names list the valid ones."""
    return game_class(name)()
