"""`mars arena`: rate agents with TrueSkill over many games, or score newcomers against a
frozen reference pool (`--reference POOL.yaml`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from cli import options
from cli.checks import check_at_least_one, check_model_spec, check_out

AGENT_HELP = ("comma-separated agents, each SPEC or LABEL=SPEC: embedded, a model or checkpoint "
              "folder, models:/NAME@ALIAS, a bot (bot:random, bot:mcts-N, bot:nash, ...)")


def add_parser(sub) -> None:
    a = sub.add_parser("arena", help="TrueSkill ratings over many games (open arena or a frozen "
                                     "reference pool)")
    a.add_argument("--preset", default=None, help="arena preset YAML (configs/arena/...)")
    a.add_argument("--agents", type=options.csv, default=None, help=AGENT_HELP)
    a.add_argument("--run", default=None,
                   help="a training run directory: its checkpoints join as agents (and the "
                        "ratings plot follows them over the iterations)")
    a.add_argument("--games", type=options.csv, default=None,
                   help="comma-separated competitive games")
    a.add_argument("--schedule", choices=("round_robin", "sampled"), default=None,
                   help="round_robin: every combination of agents, --n games each; sampled: "
                        "--matches random draws per game (default: the preset's, else "
                        "round_robin)")
    a.add_argument("--n", type=int, default=None,
                   help="games per agent combination and seat rotation")
    a.add_argument("--matches", type=int, default=None, help="draws per game (sampled schedule)")
    a.add_argument("--seed", type=int, default=None,
                   help="seed of the schedule, the deals and the sampling (default: the "
                        "preset's)")
    a.add_argument("--reference", default=None,
                   help="a frozen pool YAML: score the --agents / --run checkpoints against it")
    a.add_argument("--save-pool", default=None,
                   help="write the rated agents as a frozen pool YAML (open arena only)")
    a.add_argument("--out", default="arena.json", help="results file (default: arena.json)")
    a.add_argument("--replays", type=int, default=4,
                   help="games written as replay pages beside --out (default 4; 0: none)")
    options.tracking_args(a, "mars-arena")
    options.overrides(a, "play.max_new_tokens=128")
    options.verbose(a)


def check(args: argparse.Namespace) -> None:
    """Refuse bad flags in one line before anything is played or loaded."""
    from flows.arena import plan
    from mars_core.config import ConfigError
    from mars_core.games.opponents import is_bot

    check_at_least_one(("--n", args.n), ("--matches", args.matches))
    if args.replays < 0:
        raise ConfigError(f"--replays must be 0 or more, got {args.replays}")
    if args.reference and not Path(args.reference).is_file():
        raise ConfigError(f"--reference: no such file: {args.reference}")
    if args.reference and args.save_pool:
        raise ConfigError("--save-pool freezes an open arena; it cannot be used with --reference")
    check_out(args.out)
    check_out(args.save_pool, "--save-pool")
    try:
        p = plan(args.preset, args.agents, args.run, args.games, args.schedule, args.n,
                 args.matches, args.seed, args.reference, args.overrides)
    except ValueError as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    for label, spec in p["agents"].items():
        if not is_bot(spec):
            check_model_spec(spec, f"agent {label!r}", endpoint_ok=False, args=args)


def run(args: argparse.Namespace) -> dict:
    """Secrets in overrides or the tracking URI reach the flow in a private file
    (`mars_core.privacy.private`)."""
    from flows.arena import arena_flow
    from mars_core.privacy.private import withheld

    with withheld(overrides=args.overrides, tracking_uri=args.tracking_uri) as hidden:
        return arena_flow(preset=args.preset, agents=args.agents, run=args.run,
                          games=args.games, schedule=args.schedule, n=args.n,
                          matches=args.matches, seed=args.seed, reference=args.reference,
                          save_pool=args.save_pool, out=args.out, experiment=args.experiment,
                          runs_dir=args.runs_dir, replays=args.replays, **hidden)


def done(args: argparse.Namespace, result: dict) -> str:
    logged = f" (MLflow run {result['mlflow_run_id']})" if result["mlflow_run_id"] else ""
    return f"mars: done: {result['records']} games, leaderboard in {result['out']}{logged}"
