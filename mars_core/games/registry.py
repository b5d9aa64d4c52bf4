"""The games by name: the six MARS (OpenSpiel) games and the four MindGames (TextArena) ones. Adapter classes are imported on first use, so naming a game
(config validation, `--games` checks) costs nothing, and adapters are built once and shared:
they hold no per-episode state."""
from __future__ import annotations

import importlib
from functools import lru_cache

from mars_core.games.base import GameAdapter

# name -> (module, class); the first three are MARS's training games, the rest held out.
GAMES: dict[str, tuple[str, str]] = {
    "tic_tac_toe": ("mars_core.games.board_games", "TicTacToe"),
    "kuhn_poker": ("mars_core.games.poker", "KuhnPoker"),
    "mini_hanabi": ("mars_core.games.hanabi", "MiniHanabi"),
    "connect_four": ("mars_core.games.board_games", "ConnectFour"),
    "leduc_poker": ("mars_core.games.poker", "LeducPoker"),
    "simple_hanabi": ("mars_core.games.hanabi", "SimpleHanabi"),
    "colonel_blotto": ("mars_core.games.blotto", "ColonelBlotto"),
    "three_player_ipd": ("mars_core.games.ipd", "ThreePlayerIPD"),
    "codenames": ("mars_core.games.codenames", "Codenames"),
    "secret_mafia": ("mars_core.games.mafia", "SecretMafia"),
}
TRAIN_GAMES = ("tic_tac_toe", "kuhn_poker", "mini_hanabi")
HELD_OUT_GAMES = ("connect_four", "leduc_poker", "simple_hanabi")
MARS_GAMES = TRAIN_GAMES + HELD_OUT_GAMES  # OpenSpiel
MINDGAMES = ("colonel_blotto", "three_player_ipd", "codenames", "secret_mafia")  # TextArena


def check_game(name: str) -> None:
    """Raise ValueError listing the valid names for an unknown game."""
    if name not in GAMES:
        raise ValueError(f"unknown game {name!r}; choose one of: {', '.join(GAMES)}")


def game_class(name: str) -> type[GameAdapter]:
    check_game(name)
    module, cls = GAMES[name]
    return getattr(importlib.import_module(module), cls)


@lru_cache(maxsize=None)
def make_game(name: str) -> GameAdapter:
    """The (shared, stateless) adapter for a game name; unknown names list the valid ones."""
    return game_class(name)()
