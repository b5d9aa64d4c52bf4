"""`mars games`: every game the project can play by name, and what each supports (players,
hidden information, the bots that fit it, exact exploitability, the move limit): the catalog's
hand-written games, then every OpenSpiel game and TextArena environment through the generic
adapters; `--refused` adds the engine games that cannot be played, each with its reason.
Reads the engines only: no Prefect, no model.
"""
from __future__ import annotations

import argparse

ENGINES = ("openspiel", "textarena")


def add_parser(sub) -> None:
    g = sub.add_parser("games", help="list the games playable by name and what each supports")
    g.add_argument("--engine", choices=ENGINES, default=None,
                   help="one engine's games only (default: both)")
    g.add_argument("--refused", action="store_true",
                   help="also list the engine games that cannot be played, with the reason")


def check(args: argparse.Namespace) -> None:
    """Nothing to refuse beyond argparse's choices."""


def run(args: argparse.Namespace) -> dict:
    from mars_core.games.listing import rows, table

    listed = rows((args.engine,) if args.engine else ENGINES, refused=args.refused)
    return {"lines": table(listed), "playable": sum(not r.refused for r in listed)}


def done(args: argparse.Namespace, result: dict) -> str:
    return "\n".join([*result["lines"], f"{result['playable']} playable games; a config names "
                      "them as listed (`rollout.games`, `evaluation.opponents`, the arena's "
                      "`games`)"])
