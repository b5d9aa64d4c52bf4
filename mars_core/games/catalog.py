"""The games by name, and what a check needs to know of each without building it.

A leaf (no game engines imported): config validation and the CLI's checks read it, the game
registry (`registry.py`, which builds the adapters) takes its names from it, and a test keeps
the traits below equal to the adapters' own (`tests/unit/test_games.py`).
"""
from __future__ import annotations

# The game names (their adapter classes: `registry.ADAPTERS`); the first three are MARS's
# training games, the rest held out.
GAMES: tuple[str, ...] = ("tic_tac_toe", "kuhn_poker", "mini_hanabi", "connect_four", "leduc_poker",
                          "simple_hanabi", "colonel_blotto", "three_player_ipd", "codenames",
                          "secret_mafia")
TRAIN_GAMES = ("tic_tac_toe", "kuhn_poker", "mini_hanabi")
HELD_OUT_GAMES = ("connect_four", "leduc_poker", "simple_hanabi")
MARS_GAMES = TRAIN_GAMES + HELD_OUT_GAMES  # OpenSpiel
MINDGAMES = ("colonel_blotto", "three_player_ipd", "codenames", "secret_mafia")  # TextArena

# The adapters' traits (GameAdapter.cooperative, .perfect_information), by name:
COOPERATIVE_GAMES = ("mini_hanabi", "simple_hanabi")  # every seat shares one score
HIDDEN_INFORMATION_GAMES = ("kuhn_poker", "leduc_poker", "mini_hanabi", "simple_hanabi",
                            *MINDGAMES)  # seats hold what others do not see
NASH_GAMES = ("kuhn_poker", "leduc_poker")  # the games with a stored Nash policy (games/nash.py)
# the games with a compact prompt layout (GameAdapter.compact_rules; `play.prompt: compact`)
COMPACT_PROMPT_GAMES = ("tic_tac_toe", "kuhn_poker", "connect_four", "leduc_poker")


def check_game(name: str) -> None:
    """Raise ValueError listing the valid names for an unknown game."""
    if name not in GAMES:
        raise ValueError(f"unknown game {name!r}; choose one of: {', '.join(GAMES)}")


def check_prompt(style: str, games) -> None:
    """Raise ValueError when a game has no layout `style` (every game has "paper")."""
    if style == "paper":
        return
    missing = [g for g in games if g not in COMPACT_PROMPT_GAMES]
    if missing:
        raise ValueError(f"play.prompt {style}: no compact layout for {', '.join(missing)} "
                         f"(games with one: {', '.join(COMPACT_PROMPT_GAMES)})")
