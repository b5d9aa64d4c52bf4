"""`mars train`: train (or resume) a run from a config preset."""
from __future__ import annotations

import argparse
from pathlib import Path

from cli import options
from cli.checks import check_preset


def add_parser(sub) -> None:
    t = sub.add_parser("train", help="train (or resume) a run from a config preset")
    t.add_argument("--config", required=True, help="YAML preset, e.g. configs/smoke.yaml")
    t.add_argument("--runs-dir", default="runs", help="where runs live (default: runs)")
    t.add_argument("--run-name", default=None, help="run folder name (default: the preset's name)")
    options.overlays(t)
    options.overrides(t, "rollout.temperature=0.8")
    options.verbose(t)


def check(args: argparse.Namespace) -> None:
    from tasks.paths import check_run_name

    given = args.run_name is not None
    name = args.run_name if given else Path(args.config).stem
    check_run_name(name, "--run-name" if given else "the preset's file name (give --run-name)")
    cfg = check_preset(args.config, args.overlays, args.overrides, Path(args.runs_dir) / name)
    from tasks.estimate import calibrate_before_servers

    calibrate_before_servers(cfg)  # before Prefect's temporary server starts beside it


def run(args: argparse.Namespace) -> dict:
    """The flow gets the preset and overlays by path and the overrides with their secrets
    masked; the real values go in a private file (`mars_core.privacy.private`), never in a Prefect
    parameter."""
    from flows.train import train_flow
    from mars_core.privacy.private import withheld

    with withheld(overrides=args.overrides) as hidden:
        return train_flow(config=args.config, run_name=args.run_name, runs_dir=args.runs_dir,
                          overlays=args.overlays, **hidden)


def done(args: argparse.Namespace, result: dict) -> str:
    return f"mars: done: {result['run_dir']} (MLflow run {result['mlflow_run_id']})"
