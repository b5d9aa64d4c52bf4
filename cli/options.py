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
    """Comma-separated items; a comma inside parentheses stays in its item (an OpenSpiel
    game's parameters: `openspiel:liars_dice(numdice=1,dice_sides=4),tic_tac_toe`)."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth <= 0:
            items.append(text[start:i].strip())
            start, depth = i + 1, 0
    items.append(text[start:].strip())  # an unclosed parenthesis: the rest, as written
    return [x for x in items if x]


def tracking_args(p: argparse.ArgumentParser, experiment: str) -> None:
    p.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"),
                   help="MLflow tracking URI to log to (default: $MLFLOW_TRACKING_URI; none: no "
                        "logging)")
    p.add_argument("--experiment", default=experiment,
                   help=f"MLflow experiment to log to (default: {experiment})")
    p.add_argument("--runs-dir", default="runs",
                   help="local MLflow store for models:/ URIs when no tracking URI is set")


class _Verbose(argparse.Action):
    """`--verbose`: MARS_VERBOSE=1 for this process and its children, set while parsing (before
    any model is loaded or dataset logged), so the progress bars and third-party notes that
    `mars_core.run.offline.quiet_logs` keeps out come back."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from mars_core.run import offline

        os.environ[offline.VERBOSE] = "1"
        setattr(namespace, self.dest, True)


def verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbose", action=_Verbose,
                   help="show third-party progress bars and notes kept out by default (the "
                        "model conversion's bars, DeepSpeed's accelerator guess, MLflow's "
                        "dataset-source warning); same as MARS_VERBOSE=1")


def overrides(p: argparse.ArgumentParser, example: str) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a config value, e.g. --set {example}")


def overlays(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overlay", dest="overlays", action="append", default=[], metavar="YAML",
                   help="a partial preset merged on top, e.g. configs/scales/smoke.yaml")
