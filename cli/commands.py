"""The subcommands of `mars`, in one table: the parser is built from it, and `cli.main` checks
and runs a command through it. A subcommand is a module with

    add_parser(sub)        its flags (sub: argparse's subparsers)
    check(args)            refuse bad input in one line; reads only, writes nothing
    run(args) -> dict      do the work (a flow, mostly)
    done(args, result)     the closing line(s) on stdout
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from types import ModuleType

from cli import arena, check, compare, evaluate, games, replay, services, train


@dataclass(frozen=True)
class Command:
    module: ModuleType
    prefect: bool = True  # runs flows: a configured Prefect API must answer first
    resumable: bool = False  # the same command again resumes what an interruption stopped


COMMANDS: dict[str, Command] = {  # in the order `mars --help` lists them
    "train": Command(train, resumable=True),
    "check": Command(check, prefect=False),  # reads only: no flow, no server, nothing written
    "compare": Command(compare, resumable=True),
    "eval": Command(evaluate),
    "replay": Command(replay, prefect=False),  # a file tool
    "games": Command(games, prefect=False),  # reads the game engines only
    "arena": Command(arena),
    "services": Command(services, prefect=False),  # starts the Prefect server itself
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mars", description="Self-play RL for multi-agent reasoning.")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.module.add_parser(sub)
    return p
