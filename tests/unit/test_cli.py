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
    from mars_core import offline

    for key in offline.ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DO_NOT_TRACK", "0")  # a user's own value wins
    assert main(["services", "--prefect-port", "0"]) == 2  # refused by its check: no server
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["DO_NOT_TRACK"] == "0"
    for key in offline.ENV:
        monkeypatch.delenv(key, raising=False)
    main(["services", "--prefect-port", "0", "--runs-dir", "hf://x"])
    assert "HF_HUB_OFFLINE" not in os.environ and os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"
