"""Flags that several subcommands share, and how their values are read (a leaf: the command
modules build their parsers from it)."""
from __future__ import annotations

import argparse
import os

from mars_core.games.opponents import BOT_SPECS

POLICY_HELP = ("embedded, a model or checkpoint folder, models:/NAME@ALIAS, or a bot "
               f"({', '.join(BOT_SPECS)}; N: MCTS simulations)")
MODEL_HELP = ("embedded, a model or checkpoint folder, models:/NAME@ALIAS, or an OpenAI-compatible "
              "endpoint such as a vLLM server (http://host:port[#MODEL])")


def csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def tracking_args(p: argparse.ArgumentParser, experiment: str) -> None:
    p.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"),
                   help="MLflow tracking URI to log to (default: $MLFLOW_TRACKING_URI; none: no "
                        "logging)")
    p.add_argument("--experiment", default=experiment,
                   help=f"MLflow experiment to log to (default: {experiment})")
    p.add_argument("--runs-dir", default="runs",
                   help="local MLflow store for models:/ URIs when no tracking URI is set")


def overrides(p: argparse.ArgumentParser, example: str) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a config value, e.g. --set {example}")


def overlays(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overlay", dest="overlays", action="append", default=[], metavar="YAML",
                   help="a partial preset merged on top, e.g. configs/scales/smoke.yaml")
