"""Who may sit across a policy: the opponent specs, which of them fit which game, and the
opponents each game meets by default (from its record in `catalog.py`). A leaf (no game
engines imported): config validation and the CLI's checks use it; `bots.py` builds the bots it
names.

- `bot:random` (every game), `bot:mcts-N` (perfect-information games only), `bot:nash` (the
  games with a stored Nash policy), the game-specific bots of `GAME_BOTS`;
- `self`: the evaluated policy takes every other seat;
- `frozen` (training only): an earlier checkpoint of the run (`samplers.py`, `tasks/rollout.py`).
"""
from __future__ import annotations

import re

from mars_core.games.catalog import CATALOG, NASH_GAMES, check_game, record
from mars_core.vocab import BOT_PREFIX, FROZEN, SELF  # noqa: F401 (FROZEN: asked for here)

MCTS = re.compile(r"^bot:mcts-([1-9]\d*)$")
# spec -> the one game it plays, from the records' `bots` (their classes: `bots.GAME_BOT_CLASSES`)
GAME_BOTS: dict[str, str] = {spec: g.name for g in CATALOG for spec, _ in g.bots}
BOT_SPECS = ("bot:random", "bot:mcts-N", "bot:nash", *GAME_BOTS)
OPPONENT_SPECS = (*BOT_SPECS, SELF)

# The opponents each game meets by default, from its record (`catalog.CATALOG`): the first is
# the evaluation's default when a preset names none.
DEFAULT_OPPONENTS: dict[str, tuple[str, ...]] = {g.name: g.opponents for g in CATALOG}
# The published suites' opponents (SPEC section 6): the MARS paper's (what `mars eval games`
# plays without a preset) and the MindGames games' (ours: the arena's reference agents are not
# public).
MARS_OPPONENTS: dict[str, tuple[str, ...]] = {
    g.name: g.opponents for g in CATALOG if g.suite in ("mars-train", "mars-held-out")}
MINDGAMES_OPPONENTS: dict[str, tuple[str, ...]] = {
    g.name: g.opponents for g in CATALOG if g.suite == "mindgames"}


def default_opponents(game: str) -> tuple[str, ...]:
    """The opponents `game` meets by default, the first the evaluation's default: its record's
    (`bot:random` for an engine's game named `<family>:<name>`)."""
    return record(game).opponents


def is_bot(spec: str) -> bool:
    return spec.startswith(BOT_PREFIX)


def check_bot_spec(spec: str) -> None:
    """Raise ValueError naming the valid bot specs for an unknown one."""
    if spec in ("bot:random", "bot:nash") or spec in GAME_BOTS or MCTS.match(spec):
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
    rec = record(game)
    if rec.cooperative and spec != "bot:random":
        raise ValueError(f"opponent {spec!r} does not fit {game}: the partner in a cooperative "
                         f"game is the policy itself ({SELF!r}) or bot:random")
    if spec in GAME_BOTS and GAME_BOTS[spec] != game:
        raise ValueError(f"opponent {spec!r} does not fit {game}: it plays {GAME_BOTS[spec]}")
    if spec == "bot:nash" and not rec.nash:
        raise ValueError(f"opponent 'bot:nash' does not fit {game}: Nash policies exist for "
                         f"{', '.join(NASH_GAMES)}")
    if MCTS.match(spec) and rec.family != "openspiel":
        raise ValueError(f"opponent {spec!r} does not fit {game}: MCTS searches OpenSpiel "
                         "states, and this is a TextArena game")
    if MCTS.match(spec) and rec.hidden_information:
        raise ValueError(f"opponent {spec!r} does not fit {game}: MCTS searches the true state, "
                         "so in a game with hidden information it would see what is hidden")


def check_opponents(game: str, spec) -> None:
    """Raise ValueError for a training opponent spec (a string or a curriculum of stages with
    `opponent` and `unlock_at`) that does not fit `game`."""
    stages = [spec] if isinstance(spec, str) else list(spec)
    if not stages:
        raise ValueError(f"rollout.opponents[{game}]: the curriculum is empty")
    if not isinstance(spec, str) and min(s.unlock_at for s in stages) != 0:
        raise ValueError(f"rollout.opponents[{game}]: the first opponent must unlock at 0")
    for s in stages:
        name = s if isinstance(s, str) else s.opponent
        if name != FROZEN:
            check_opponent(name, game)


def check_suite(suite: dict[str, list[str] | tuple[str, ...]], policy: str) -> None:
    """Refuse, before anything runs, unknown games, unknown opponents and opponents that do
    not fit their game (ValueError naming the valid choices)."""
    if not suite:
        raise ValueError("no games to evaluate")
    if is_bot(policy):
        check_bot_spec(policy)
    for game, opponents in suite.items():
        check_game(game)
        if not opponents:
            raise ValueError(f"no opponents for {game}")
        for opp in opponents:
            check_opponent(opp, game)
        if is_bot(policy):  # a bot policy must fit the game too (no MCTS on poker)
            check_opponent(policy, game)
