"""`mars compare`: train several presets, evaluate each, log one table."""
from __future__ import annotations

import argparse
from pathlib import Path

from cli import options
from cli.checks import check_preset


def add_parser(sub) -> None:
    c = sub.add_parser("compare", help="train several presets, evaluate each, log one table")
    c.add_argument("--presets", type=options.csv, default=None,
                   help="comma-separated presets (default: the four in configs/ablations/)")
    c.add_argument("--eval-preset", default="configs/eval/mars_strategic_quick.yaml",
                   help="strategic evaluation preset (default: the quick MARS suite)")
    c.add_argument("--games", type=options.csv, default=None,
                   help="evaluate on these games only")
    c.add_argument("--n", type=int, default=None, help="evaluation games per game x opponent x seat")
    c.add_argument("--name", default="ablations",
                   help="runs are <name>-<preset>, the table in <runs-dir>/<name>-compare")
    c.add_argument("--runs-dir", default="runs", help="where runs live (default: runs)")
    c.add_argument("--experiment", default="mars-ablations", help="MLflow experiment of the table")
    options.overlays(c)
    options.overrides(c, "run.iterations=2")


def check(args: argparse.Namespace) -> None:
    from flows.compare import ABLATIONS
    from mars_core.config import ConfigError, load_strategic_config
    from tasks.paths import check_run_name

    presets = args.presets or list(ABLATIONS)
    stems = [Path(p).stem for p in presets]
    check_run_name(args.name, "--name")
    for stem in stems:
        check_run_name(f"{args.name}-{stem}", "a preset's run name (--name plus its file name)")
    if len(set(stems)) != len(stems):
        raise ConfigError("--presets: two presets share a file name; rename one")
    if args.n is not None and args.n < 1:
        raise ConfigError(f"--n must be at least 1, got {args.n}")
    for preset, stem in zip(presets, stems):
        check_preset(preset, args.overlays, args.overrides,
                     Path(args.runs_dir) / f"{args.name}-{stem}")
    load_strategic_config(args.eval_preset, args.games, None, args.n, None)


def run(args: argparse.Namespace) -> dict:
    """Secrets in overrides reach the flow in a private file (`mars_core.private`)."""
    from flows.compare import compare_flow
    from mars_core.private import withheld

    with withheld(overrides=args.overrides) as hidden:
        return compare_flow(presets=args.presets, overlays=args.overlays,
                            eval_preset=args.eval_preset, games=args.games, n=args.n,
                            name=args.name, runs_dir=args.runs_dir, experiment=args.experiment,
                            **hidden)


def done(args: argparse.Namespace, result: dict) -> str:
    return f"mars: done: {len(result['table'])} rows (MLflow run {result['mlflow_run_id']})"
