"""`mars compare`: train several presets, evaluate each, log one table; with `--seeds`, every
variant over every base preset once per seed, aggregated over seeds (`flows.compare`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from cli import options
from cli.checks import check_preset


EVAL_PRESET = "configs/eval/mars_strategic_quick.yaml"


def seeds_of(args: argparse.Namespace) -> list[int] | None:
    """`--seeds` as numbers (None without it); anything but distinct whole numbers >= 0 is a
    ConfigError."""
    from mars_core.config import ConfigError

    if args.seeds is None:
        return None
    bad = ConfigError(f"--seeds takes distinct whole numbers >= 0, e.g. 0,1,2 (got "
                      f"{','.join(args.seeds)!r})")
    try:
        seeds = [int(s) for s in args.seeds]
    except ValueError:
        raise bad from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise bad
    return seeds


def add_parser(sub) -> None:
    c = sub.add_parser("compare", help="train several presets, evaluate each, log one table")
    c.add_argument("--presets", type=options.csv, default=None,
                   help="comma-separated presets (default: the six in configs/ablations/)")
    c.add_argument("--eval-preset", default=None,
                   help="game evaluation preset (default: configs/eval/"
                        "mars_strategic_quick.yaml); not with --seeds")
    c.add_argument("--games", type=options.csv, default=None,
                   help="evaluate on these games only; not with --seeds")
    c.add_argument("--n", type=int, default=None,
                   help="evaluation games per game x opponent x seat (with --seeds: each run's "
                        "evaluation.games_per_seat)")
    c.add_argument("--seeds", type=options.csv, default=None,
                   help="train every variant over every base once per seed (run.seed), e.g. "
                        "0,1,2, and aggregate over seeds (each run's own evaluations)")
    c.add_argument("--bases", type=options.csv, default=None,
                   help="with --seeds: the presets the variants change (default: "
                        "configs/ablations/bases/kuhn_short.yaml, Kuhn cut at its plateau)")
    c.add_argument("--variants", type=options.csv, default=None,
                   help="with --seeds: overlays, the first the reference (default: the five "
                        "in configs/ablations/variants/)")
    c.add_argument("--name", default=None,
                   help="runs are <name>-<preset> (with --seeds <name>-<base>-<variant>-s<seed>), "
                        "the table in <runs-dir>/<name>-compare (default: ablations; with "
                        "--seeds ablate)")
    c.add_argument("--runs-dir", default="runs", help="where runs live (default: runs)")
    c.add_argument("--experiment", default="mars-ablations", help="MLflow experiment of the table")
    options.overlays(c)
    options.overrides(c, "run.iterations=2")
    options.verbose(c)


def _name(args: argparse.Namespace) -> str:
    return args.name or ("ablate" if args.seeds is not None else "ablations")


def check(args: argparse.Namespace) -> None:
    from mars_core.config import ConfigError

    if args.n is not None and args.n < 1:
        raise ConfigError(f"--n must be at least 1, got {args.n}")
    if seeds_of(args) is not None:
        return _check_seeds(args)
    for flag, value in (("--bases", args.bases), ("--variants", args.variants)):
        if value is not None:
            raise ConfigError(f"{flag} goes with --seeds (the comparison across seeds)")
    from flows.compare import ABLATIONS
    from mars_core.config import load_game_eval_config
    from tasks.paths import check_run_name

    presets = args.presets or list(ABLATIONS)
    stems = [Path(p).stem for p in presets]
    check_run_name(_name(args), "--name")
    for stem in stems:
        check_run_name(f"{_name(args)}-{stem}", "a preset's run name (--name plus its file name)")
    if len(set(stems)) != len(stems):
        raise ConfigError("--presets: two presets share a file name; rename one")
    for preset, stem in zip(presets, stems):
        check_preset(preset, args.overlays, args.overrides,
                     Path(args.runs_dir) / f"{_name(args)}-{stem}")
    load_game_eval_config(args.eval_preset or EVAL_PRESET, args.games, None, args.n, None)


def _check_seeds(args: argparse.Namespace) -> None:
    """Every run of the comparison loads, may use its folder and evaluates at its end (its
    final evaluation is what the comparison reads)."""
    from flows.compare import ABLATE_BASES, VARIANTS, ablation_runs, run_overrides
    from mars_core.config import ConfigError, load_config
    from tasks.paths import check_run_name

    for flag, value in (("--presets", args.presets), ("--eval-preset", args.eval_preset),
                        ("--games", args.games)):
        if value is not None:
            raise ConfigError(f"{flag} does not go with --seeds (the runs' own evaluations are "
                              "compared; give --bases and --variants)")
    name = check_run_name(_name(args), "--name")
    bases, variants = args.bases or list(ABLATE_BASES), args.variants or list(VARIANTS)
    for flag, files in (("--bases", bases), ("--variants", variants)):
        stems = [Path(f).stem for f in files]
        if len(set(stems)) != len(stems):
            raise ConfigError(f"{flag}: two files share a file name; rename one")
    for base, variant, seed, run_name in ablation_runs(bases, variants, seeds_of(args), name):
        check_run_name(run_name, "a run name (--name, base, variant and seed)")
        sets = [*args.overrides, *run_overrides(name, base, variant, seed, args.experiment, args.n)]
        layers = [*args.overlays, variant]
        cfg = load_config(base, sets, overlays=layers)
        if not cfg.evaluation.every:
            raise ConfigError(f"--bases: {base} never evaluates (evaluation.every is 0), and "
                              "the comparison reads each run's final evaluation")
        check_preset(base, layers, sets, Path(args.runs_dir) / run_name)


def run(args: argparse.Namespace) -> dict:
    """Secrets in overrides reach the flow in a private file (`mars_core.privacy.private`)."""
    from flows.compare import ablation_flow, compare_flow
    from mars_core.privacy.private import withheld

    common = {"overlays": args.overlays, "n": args.n, "name": _name(args),
              "runs_dir": args.runs_dir, "experiment": args.experiment}
    with withheld(overrides=args.overrides) as hidden:
        if args.seeds is not None:
            return ablation_flow(seeds=seeds_of(args), bases=args.bases, variants=args.variants,
                                 **common, **hidden)
        return compare_flow(presets=args.presets, eval_preset=args.eval_preset or EVAL_PRESET,
                            games=args.games, **common, **hidden)


def done(args: argparse.Namespace, result: dict) -> str:
    if args.seeds is not None:
        return (f"mars: done: {len(result['runs'])} runs, {len(result['rows'])} rows "
                f"(MLflow run {result['mlflow_run_id']})")
    return f"mars: done: {len(result['table'])} rows (MLflow run {result['mlflow_run_id']})"
