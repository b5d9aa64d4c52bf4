"""The games, one record each, and what a check needs to know of each without building it.

A game is one `Game` record in `CATALOG`: its name, engine family, traits, its adapter class
(imported on first use), the opponents its evaluation meets and its post-episode pipeline.
Every other table is read from it: the names and family tuples below, the trait tuples the
checks read, the adapters (`registry.ADAPTERS`), the opponents (`opponents.DEFAULT_OPPONENTS`)
and the pipelines (`mars_core.postprocess.PIPELINES`). A leaf: no game engine is imported
until an adapter is asked for, so config validation and the CLI's checks read it freely; a
test keeps the traits equal to the adapters' own (`tests/unit/test_games.py`). An engine's own
game named `openspiel:<name>` or `textarena:<EnvId>` gets its record from `record(name)`, built
from the engine (which loads then) by the family's generic adapter module (`GENERIC`).
"""
from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from mars_core import games  # the family modules, as attributes imported on first use
from mars_core.vocab import BOT_PREFIX, SELF

if TYPE_CHECKING:
    from mars_core.games.base import GameAdapter

FAMILIES = ("openspiel", "textarena")  # the engines: MARS_GAMES, MINDGAMES
# the published suites a game may belong to (SPEC section 6); "" for a game of our own
SUITES = ("mars-train", "mars-held-out", "mindgames", "")


@dataclass(frozen=True)
class Game:
    """One game. `adapter` returns its class (a lambda: the engine loads when it is called);
    `opponents`: its evaluation's opponents, the first the default; `pipeline`: the module of
    `mars_core.postprocess` that grades its episodes ("mars": the MARS rewards); `bots`: the
    bots that play only this game, (spec, a lambda returning the class, built with a seed).
    The traits equal the adapter's (`cooperative`, `not perfect_information`, a stored Nash
    policy in `nash.py`, a "compact" prompt layout)."""

    name: str
    family: str
    adapter: Callable[[], type[GameAdapter]]
    opponents: tuple[str, ...]
    pipeline: str = "mars"
    suite: str = ""
    bots: tuple[tuple[str, Callable[[], type]], ...] = ()
    cooperative: bool = False  # every seat shares one score
    hidden_information: bool = False  # seats hold what others do not see
    nash: bool = False
    compact_prompt: bool = False


# In this order listings and the evaluation's seeds go: a new game is appended at the end.
CATALOG: tuple[Game, ...] = (
    Game("tic_tac_toe", "openspiel", lambda: games.board_games.TicTacToe,
         ("bot:mcts-100", "bot:mcts-1000"), suite="mars-train", compact_prompt=True),
    Game("kuhn_poker", "openspiel", lambda: games.poker.KuhnPoker, ("bot:nash",),
         suite="mars-train", hidden_information=True, nash=True, compact_prompt=True),
    Game("mini_hanabi", "openspiel", lambda: games.hanabi.MiniHanabi, (SELF,),
         suite="mars-train", cooperative=True, hidden_information=True),
    Game("connect_four", "openspiel", lambda: games.board_games.ConnectFour,
         ("bot:mcts-10", "bot:mcts-100"), suite="mars-held-out", compact_prompt=True),
    Game("leduc_poker", "openspiel", lambda: games.poker.LeducPoker, ("bot:nash",),
         suite="mars-held-out", hidden_information=True, nash=True, compact_prompt=True),
    Game("simple_hanabi", "openspiel", lambda: games.hanabi.SimpleHanabi, (SELF,),
         suite="mars-held-out", cooperative=True, hidden_information=True),
    # the MindGames games' opponents are ours: the arena's reference agents are not public
    Game("colonel_blotto", "textarena", lambda: games.blotto.ColonelBlotto,
         ("bot:random", "bot:blotto-focus"), pipeline="blotto", suite="mindgames",
         bots=(("bot:blotto-focus", lambda: games.blotto.FocusBot),
               ("bot:blotto-mix", lambda: games.blotto.MixBot)), hidden_information=True),
    Game("three_player_ipd", "textarena", lambda: games.ipd.ThreePlayerIPD,
         ("bot:tit-for-tat", "bot:always-defect"), pipeline="ipd", suite="mindgames",
         bots=(("bot:tit-for-tat", lambda: games.ipd.TitForTatBot),
               ("bot:always-defect", lambda: games.ipd.AlwaysDefectBot)),
         hidden_information=True),
    Game("codenames", "textarena", lambda: games.codenames.Codenames, ("bot:random",),
         pipeline="codenames", suite="mindgames", hidden_information=True),
    Game("secret_mafia", "textarena", lambda: games.mafia.SecretMafia, ("bot:random",),
         pipeline="mafia", suite="mindgames", hidden_information=True),
)


def _check_catalog(records: tuple[Game, ...]) -> None:
    """Raise ValueError, in one line, for a record the tables below cannot be read from."""
    seen: set[str] = set()
    bots: set[str] = set()
    for g in records:
        if g.name in seen:
            raise ValueError(f"games catalog: {g.name!r} is recorded twice")
        seen.add(g.name)
        if g.family not in FAMILIES:
            raise ValueError(f"games catalog: {g.name} has family {g.family!r}; "
                             f"choose one of: {', '.join(FAMILIES)}")
        if g.suite not in SUITES:
            raise ValueError(f"games catalog: {g.name} has suite {g.suite!r}; "
                             f"choose one of: {', '.join(map(repr, SUITES))}")
        if not g.opponents:
            raise ValueError(f"games catalog: {g.name} has no opponents")
        for spec, _ in g.bots:
            if not spec.startswith(BOT_PREFIX) or spec in bots:
                raise ValueError(f"games catalog: {g.name}'s bot {spec!r} must start with "
                                 f"{BOT_PREFIX!r} and play one game only")
            bots.add(spec)


_check_catalog(CATALOG)


def _names(**fields) -> tuple[str, ...]:
    return tuple(g.name for g in CATALOG if all(getattr(g, k) == v for k, v in fields.items()))


GAMES: tuple[str, ...] = _names()
TRAIN_GAMES = _names(suite="mars-train")  # MARS's training games
HELD_OUT_GAMES = _names(suite="mars-held-out")  # and its held-out ones
MARS_GAMES = _names(family="openspiel")  # OpenSpiel (tests/unit/test_games.py plays them all)
MINDGAMES = _names(family="textarena")  # TextArena
# The adapters' traits (GameAdapter.cooperative, .perfect_information), by name:
COOPERATIVE_GAMES = _names(cooperative=True)
HIDDEN_INFORMATION_GAMES = _names(hidden_information=True)
NASH_GAMES = _names(nash=True)  # the games with a stored Nash policy (games/nash.py)
# the games with a compact prompt layout (GameAdapter.compact_rules; `play.prompt: compact`)
COMPACT_PROMPT_GAMES = _names(compact_prompt=True)


_BY_NAME = {g.name: g for g in CATALOG}
# The engines' own games by name (`openspiel:<short_name>(key=value,...)`,
# `textarena:<EnvId>`): the family's module of generic adapters, imported when such a name is
# first asked for (its engine loads then, to check the game).
GENERIC = {"openspiel": lambda: games.openspiel_generic,
           "textarena": lambda: games.textarena_generic}


def record(name: str) -> Game:
    """The game's record: a catalog game's, or one built for an engine's game named by
    `<family>:<name>` (traits read from the engine; opponents `bot:random`). ValueError in
    one line for an unknown name or a game that cannot be played, with the reason."""
    if not isinstance(name, str):
        raise ValueError(f"a game name is text, not {name!r}")
    if name in _BY_NAME:
        return _BY_NAME[name]
    family, sep, spec = name.partition(":")
    if sep and family in GENERIC:
        return _generic(family, spec)
    raise ValueError(f"unknown game {name!r}; choose one of: {', '.join(GAMES)}, or any "
                     f"engine game as {' or '.join(f'{f}:<name>' for f in GENERIC)} "
                     "(`mars games` lists them)")


@lru_cache(maxsize=None)
def _generic(family: str, spec: str) -> Game:
    module = GENERIC[family]()
    traits = module.describe(spec)  # ValueError naming the game and why it cannot be played
    return Game(f"{family}:{spec}", family, lambda: module.adapter(spec), ("bot:random",),
                cooperative=traits["cooperative"],
                hidden_information=traits["hidden_information"])


def is_generic(name: str) -> bool:
    """Whether `name` is an engine's game named through its family (`openspiel:nim`)."""
    return name not in _BY_NAME and name.partition(":")[0] in GENERIC


def order_key(name: str) -> tuple:
    """Listings and the evaluation's seeds go in the catalog's order, then engine games by
    name (`game_index` gives those a stable index of their own)."""
    return (0, GAMES.index(name), "") if name in _BY_NAME else (1, 0, name)


def game_index(name: str) -> int:
    """A stable index per game for seeds: the catalog's position, or for an engine game a
    number from its name (the same in every process and run)."""
    if name in _BY_NAME:
        return GAMES.index(name)
    return len(GAMES) + zlib.crc32(name.encode()) % 100_000


def file_name(name: str) -> str:
    """The game's name as a part of a file name (`openspiel:liars_dice(numdice=1)` ->
    `openspiel_liars_dice_numdice_1_`): letters, digits, `_ - .` only."""
    return re.sub(r"[^\w.\-]", "_", name)


def check_game(name: str) -> None:
    """Raise ValueError naming the valid choices for an unknown game (or why an engine's game
    cannot be played)."""
    record(name)


def check_prompt(style: str, games) -> None:
    """Raise ValueError when a game has no layout `style` (every game has "paper")."""
    if style == "paper":
        return
    missing = [g for g in games if not record(g).compact_prompt]
    if missing:
        raise ValueError(f"play.prompt {style}: no compact layout for {', '.join(missing)} "
                         f"(games with one: {', '.join(COMPACT_PROMPT_GAMES)})")
