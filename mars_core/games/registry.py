"""The games by name: the six MARS (OpenSpiel) games and the four MindGames (TextArena) ones.
The names live in `catalog.py` (a leaf: config validation and `--games` checks read it without
building anything); adapter classes are imported on first use, and adapters are built once and
shared: they hold no per-episode state."""
from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from mars_core.games.base import GameAdapter
from mars_core.games.catalog import GAMES, check_game


# The game families, each imported on first use (OpenSpiel's and TextArena's engines load then).
def _board_games():
    from mars_core.games import board_games
    return board_games


def _poker():
    from mars_core.games import poker
    return poker


def _hanabi():
    from mars_core.games import hanabi
    return hanabi


def _blotto():
    from mars_core.games import blotto
    return blotto


def _ipd():
    from mars_core.games import ipd
    return ipd


def _codenames():
    from mars_core.games import codenames
    return codenames


def _mafia():
    from mars_core.games import mafia
    return mafia


# name -> its adapter class (go to definition follows each entry), in the catalog's order
ADAPTERS: dict[str, Callable[[], type[GameAdapter]]] = {
    "tic_tac_toe": lambda: _board_games().TicTacToe,
    "kuhn_poker": lambda: _poker().KuhnPoker,
    "mini_hanabi": lambda: _hanabi().MiniHanabi,
    "connect_four": lambda: _board_games().ConnectFour,
    "leduc_poker": lambda: _poker().LeducPoker,
    "simple_hanabi": lambda: _hanabi().SimpleHanabi,
    "colonel_blotto": lambda: _blotto().ColonelBlotto,
    "three_player_ipd": lambda: _ipd().ThreePlayerIPD,
    "codenames": lambda: _codenames().Codenames,
    "secret_mafia": lambda: _mafia().SecretMafia,
}
assert tuple(ADAPTERS) == GAMES, "the registry and the catalog name the same games"


def game_class(name: str) -> type[GameAdapter]:
    check_game(name)
    return ADAPTERS[name]()


@lru_cache(maxsize=None)
def make_game(name: str) -> GameAdapter:
    """The (shared, stateless) adapter for a game name; unknown names list the valid ones."""
    return game_class(name)()
