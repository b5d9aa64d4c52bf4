"""The `mars` command's one table of subcommands: the parser, the checks and the runs agree."""
from __future__ import annotations

import os

from cli.commands import COMMANDS, parser


def test_every_subcommand_comes_from_the_table():
    sub = next(a for a in parser()._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMANDS)
    for name, command in COMMANDS.items():
        for part in ("add_parser", "check", "run", "done"):
            assert callable(getattr(command.module, part)), f"{name} has no {part}"


def test_the_environment_is_quiet_and_offline_unless_hf_is_asked(monkeypatch):
    from cli.main import main
    from mars_core.run import offline

    for key in offline.ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DO_NOT_TRACK", "0")  # a user's own value wins
    assert main(["services", "--prefect-port", "0"]) == 2  # refused by its check: no server
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["DO_NOT_TRACK"] == "0"
    for key in offline.ENV:
        monkeypatch.delenv(key, raising=False)
    main(["services", "--prefect-port", "0", "--runs-dir", "hf://x"])
    assert "HF_HUB_OFFLINE" not in os.environ and os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"


def test_eval_games_is_the_game_evaluation_and_strategic_still_works():
    from cli import evaluate

    args = ["--policy", "bot:random", "--games", "tic_tac_toe", "--n", "1"]
    new = parser().parse_args(["eval", "games", *args])
    old = parser().parse_args(["eval", "strategic", *args])
    for a in (new, old):
        evaluate.check(a)  # the former name is normalised to the one word
    assert vars(new) == vars(old) and new.kind == "games"
    assert evaluate.done(old, {"records": 2, "out": "r.json", "mlflow_run_id": None}) == \
        "mars: done: 2 records in r.json"
    mas = parser().parse_args(["eval", "mas", "--model", "embedded", "--max-tokens", "9"])
    assert mas.max_new_tokens == 9  # the token limit's former flag


def _parsers(p, path="mars"):
    """Every parser of the CLI (each subcommand's, nested ones too), with its command path;
    an alias (the same parser under a former name) once."""
    import argparse

    yield path, p
    seen: set[int] = set()
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                if id(child) not in seen:
                    seen.add(id(child))
                    yield from _parsers(child, f"{path} {name}")


def test_every_option_of_every_subcommand_has_help():
    import argparse

    found, missing = 0, []
    for path, p in _parsers(parser()):
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            found += 1
            if action.help is not argparse.SUPPRESS and not (action.help or "").strip():
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert found > 50 and not missing, f"options without help: {', '.join(missing)}"
