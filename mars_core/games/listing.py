"""Every game the project can play, by name, and what each supports: the catalog's games (the
hand-written adapters), then every registered OpenSpiel game and every TextArena `-v0`
environment through their generic adapters (`openspiel_generic`, `textarena_generic`), with
the reason for each one refused. `mars games` prints it; docs/games/playable.md is generated
from it (`docs/gen_reference.py`). Loads both engines.
"""
from __future__ import annotations

from dataclasses import dataclass

from mars_core.games.catalog import CATALOG, record
from mars_core.games.opponents import check_opponent


@dataclass(frozen=True)
class Row:
    name: str  # what a config names
    engine: str  # "openspiel" or "textarena"
    adapter: str  # "hand-written" or "generic"
    players: int = 0
    information: str = ""  # "perfect" or "hidden"
    opponents: str = ""  # the bots that fit it
    exploitability: bool = False  # measured exactly (mars_core.strength.exploitability)
    move_limit: int | None = None  # scored as it stands after this many moves
    refused: str = ""  # why it cannot be played ("" when it can)


def fitting_bots(name: str) -> str:
    """The bots that may sit across a policy in `name`, as `opponents.check_opponent` rules
    (`bot:mcts-N` standing for every number of simulations)."""
    specs = ("bot:random", "bot:mcts-N", "bot:nash", *(s for s, _ in record(name).bots))
    return ", ".join(s for s in specs if _fits(s.replace("-N", "-10"), name))


def _fits(spec: str, game: str) -> bool:
    try:
        check_opponent(spec, game)
    except ValueError:
        return False
    return True


def _row(name: str, adapter: str) -> Row:
    from mars_core.games.registry import make_game

    rec, game = record(name), make_game(name)
    return Row(name, rec.family, adapter, game.num_players,
               "hidden" if rec.hidden_information else "perfect", fitting_bots(name), rec.nash,
               game.move_limit)


def rows(engines: tuple[str, ...] = ("openspiel", "textarena"), refused: bool = True) -> list[Row]:
    """The catalog's games, then each engine's own (playable first, in name order; the refused
    ones after, with their reason, when `refused`)."""
    from mars_core.games import openspiel_generic, textarena_generic

    out = [_row(g.name, "hand-written") for g in CATALOG if g.family in engines]
    generic = {"openspiel": openspiel_generic, "textarena": textarena_generic}
    for engine in engines:
        listed = generic[engine].playable()
        out += [_row(f"{engine}:{n}", "generic") for n, why in listed if not why]
        if refused:
            out += [Row(f"{engine}:{n}", engine, "generic", refused=why)
                    for n, why in listed if why]
    return out


def table(listed: list[Row]) -> list[str]:
    """The rows as a Markdown table (the docs page, `mars games`)."""
    lines = ["| game | engine | adapter | players | information | opponents | exploitability "
             "| move limit |", "|---|---|---|---:|---|---|---|---:|"]
    for r in listed:
        if r.refused:
            lines.append(f"| `{r.name}` | {r.engine} | refused: {r.refused} | | | | | |")
        else:
            lines.append(f"| `{r.name}` | {r.engine} | {r.adapter} | {r.players} | "
                         f"{r.information} | {r.opponents} | {'exact' if r.exploitability else '-'}"
                         f" | {r.move_limit or '-'} |")
    return lines
