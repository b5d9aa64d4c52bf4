"""`mars eval`: the game evaluation, a policy against fixed opponents (`games`; `strategic`, its
former name, still works), reasoning benchmarks inside multi-agent systems (`mas`), or
single-agent numbers through lm-evaluation-harness (`harness`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from cli import options
from cli.checks import check_at_least_one, check_cluster, check_model_spec, check_out


GAMES_KIND, FORMER_GAMES_KIND = "games", "strategic"  # `mars eval games`, formerly `strategic`


def add_parser(sub) -> None:
    from eval.systems import SYSTEMS
    from mars_core.games.catalog import GAMES
    from mars_core.games.opponents import OPPONENT_SPECS

    e = sub.add_parser("eval", help="evaluate a policy").add_subparsers(dest="kind", required=True)
    s = e.add_parser(GAMES_KIND, aliases=[FORMER_GAMES_KIND],
                     help=f"game evaluation: a policy against fixed opponents (the MARS "
                          f"strategic-ability protocol; `{FORMER_GAMES_KIND}`: its former name)")
    s.add_argument("--policy", required=True, help=options.POLICY_HELP)
    s.add_argument("--preset", default=None,
                   help="evaluation preset YAML (default: the full MARS suite, 1000 games)")
    s.add_argument("--games", type=options.csv, default=None,
                   help=f"comma-separated games to play: {', '.join(GAMES)}, or an engine's "
                        "game by name: openspiel:<name>, textarena:<EnvId> (`mars games`)")
    s.add_argument("--opponents", type=options.csv, default=None,
                   help=f"comma-separated opponents: {', '.join(OPPONENT_SPECS)} (N: MCTS "
                        "simulations; each must fit its game)")
    s.add_argument("--n", type=int, default=None, help="games per game x opponent x seat")
    s.add_argument("--seed", type=int, default=None,
                   help="seed of the deals and the policy's sampling (default: the preset's)")
    s.add_argument("--out", default="results.json", help="records file (default: results.json)")
    options.tracking_args(s, "mars-strategic-eval")
    options.overrides(s, "play.max_new_tokens=256")
    options.verbose(s)
    m = e.add_parser("mas", help="reasoning benchmarks inside multi-agent systems (debate, "
                                 "assistant/user proxy, single agent)")
    m.add_argument("--baseline", default=None,
                   help="a second model for the comparison table (same forms as --model)")
    m.add_argument("--systems", type=options.csv, default=list(SYSTEMS),
                   help=f"comma-separated systems: {', '.join(SYSTEMS)} (default: all)")
    _benchmark_args(m, "mas_results.json", 32, "in-process engine batch (an endpoint gets 8x "
                                               "this many requests at once)")
    m.add_argument("--shards", type=int, default=1,
                   help="split the questions into this many shards, each with its own engine "
                        "(default 1)")
    m.add_argument("--ray-address", default=None,
                   help="run the shards on this Ray cluster (auto, host:6379 or ray://host:10001)")
    m.add_argument("--api-key-env", default=None, metavar="NAME",
                   help="the environment variable holding --model's endpoint key (sent as a "
                        "bearer key; the key itself never goes on the command line)")
    m.add_argument("--baseline-api-key-env", default=None, metavar="NAME",
                   help="the same for --baseline's endpoint")
    h = e.add_parser("harness", help="single-agent numbers through lm-evaluation-harness "
                                     "(the eval extra), on the same benchmark files")
    _benchmark_args(h, "harness_results.json", 8, "lm-eval batch (an endpoint: concurrent "
                                                  "requests)")


def _benchmark_args(m, out: str, batch: int, batch_help: str) -> None:
    from eval.benchmarks import BENCHMARKS, SHIPPED
    from mars_core.engines.chat import BENCHMARK_SAMPLING

    m.add_argument("--model", required=True, help=options.MODEL_HELP)
    m.add_argument("--benchmarks", type=options.csv, default=None,
                   help=f"comma-separated: {', '.join(BENCHMARKS)} (default: the "
                        f"{len(SHIPPED)} shipped ones)")
    m.add_argument("--limit", type=int, default=None,
                   help="questions per benchmark, spread evenly over the file (default: all)")
    m.add_argument("--max-new-tokens", "--max-tokens", dest="max_new_tokens", type=int,
                   default=BENCHMARK_SAMPLING.max_new_tokens,
                   help=f"the token limit per reply (default {BENCHMARK_SAMPLING.max_new_tokens}, "
                        "the benchmark protocol's; --max-tokens: its former name)")
    m.add_argument("--seed", type=int, default=0,
                   help="sampling seed: every reply's seed follows from it (default 0)")
    m.add_argument("--batch-size", type=int, default=batch, help=batch_help)
    m.add_argument("--data-dir", default=None,
                   help="benchmark folder (default: $MARS_BENCHMARK_DIR, else ../shared/data/"
                        "benchmarks), or hf:// to load each benchmark from its publisher's "
                        "dataset on the Hugging Face hub (hf://MIRROR: a local copy of those "
                        "dataset repositories, MIRROR/<owner>/<name>)")
    m.add_argument("--gpqa-path", default=None,
                   help="your GPQA-Diamond CSV (gated: read in place, never copied or logged)")
    m.add_argument("--out", default=out, help=f"results file (default: {out})")
    options.tracking_args(m, "mars-mas-eval")
    options.verbose(m)


def check(args: argparse.Namespace) -> None:
    args.kind = GAMES_KIND if args.kind == FORMER_GAMES_KIND else args.kind
    if args.kind in ("mas", "harness"):
        return _check_benchmarks(args)
    from mars_core.config import ConfigError, load_game_eval_config
    from mars_core.games.opponents import check_suite, is_bot

    check_at_least_one(("--n", args.n))
    cfg = load_game_eval_config(args.preset, args.games, args.opponents, args.n, args.seed,
                                args.overrides)
    try:
        check_suite(cfg.suite, args.policy)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not is_bot(args.policy):
        check_model_spec(args.policy, "--policy", endpoint_ok=False, args=args)
    check_out(args.out)
    check_cluster(cfg.cluster)


def _check_benchmarks(args: argparse.Namespace) -> None:
    from eval.benchmarks import SHIPPED, BenchmarkError, check_names, data_dir
    from eval.systems import check_systems
    from mars_core.config import ConfigError

    check_at_least_one(("--limit", args.limit), ("--max-new-tokens", args.max_new_tokens),
                       ("--batch-size", args.batch_size), ("--shards", getattr(args, "shards", 1)))
    try:
        check_systems(getattr(args, "systems", []))
        check_names(args.benchmarks or list(SHIPPED), args.gpqa_path)
        if any(b != "gpqa_diamond" for b in args.benchmarks or SHIPPED):
            data_dir(args.data_dir)
    except (ValueError, BenchmarkError) as e:
        raise ConfigError(str(e)) from None
    if args.gpqa_path and not args.gpqa_path.startswith("hf://") and not Path(args.gpqa_path).is_file():
        raise ConfigError(f"--gpqa-path: no such file: {args.gpqa_path}")
    check_model_spec(args.model, "--model", args=args)
    if getattr(args, "baseline", None):
        check_model_spec(args.baseline, "--baseline", args=args)
    for flag in ("--api-key-env", "--baseline-api-key-env"):
        _check_key_env(getattr(args, flag[2:].replace("-", "_"), None), flag)
    check_out(args.out)
    check_cluster(getattr(args, "ray_address", None))


def _check_key_env(name: str | None, flag: str) -> None:
    """An API-key variable's name: a variable name that is set (its value is never shown)."""
    import os
    import re

    from mars_core.config import ConfigError

    if name is None:
        return
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ConfigError(f"{flag}: {name!r} is not an environment variable name (give the "
                          "variable's name, e.g. VLLM_API_KEY, never the key)")
    if not os.environ.get(name):
        raise ConfigError(f"{flag}: the environment variable {name} is not set")


def run(args: argparse.Namespace) -> dict:
    """Secrets (credentials in an endpoint's or the tracking server's URL, secret overrides)
    reach the flow in a private file, never as Prefect parameters (`mars_core.privacy.private`)."""
    from mars_core.privacy.private import withheld

    if args.kind == "harness":
        from flows.reasoning_benchmarks import harness_eval_flow

        with withheld(model=args.model, tracking_uri=args.tracking_uri) as hidden:
            return harness_eval_flow(
                benchmarks=args.benchmarks, limit=args.limit, out=args.out,
                data_dir=args.data_dir, gpqa_path=args.gpqa_path,
                max_new_tokens=args.max_new_tokens, seed=args.seed, batch_size=args.batch_size, experiment=args.experiment,
                runs_dir=args.runs_dir, **hidden)
    if args.kind == "mas":
        from flows.reasoning_benchmarks import mas_eval_flow

        with withheld(model=args.model, baseline=args.baseline,
                      tracking_uri=args.tracking_uri) as hidden:
            return mas_eval_flow(
                systems=args.systems, benchmarks=args.benchmarks, limit=args.limit,
                out=args.out, data_dir=args.data_dir, gpqa_path=args.gpqa_path,
                max_new_tokens=args.max_new_tokens, seed=args.seed, batch_size=args.batch_size,
                experiment=args.experiment, runs_dir=args.runs_dir, shards=args.shards,
                ray_address=args.ray_address, api_key_env=args.api_key_env,
                baseline_api_key_env=args.baseline_api_key_env, **hidden)
    from flows.strength_suite import game_eval_flow

    with withheld(overrides=args.overrides, tracking_uri=args.tracking_uri) as hidden:
        return game_eval_flow(
            policy=args.policy, preset=args.preset, games=args.games, opponents=args.opponents,
            n=args.n, seed=args.seed, out=args.out, experiment=args.experiment,
            runs_dir=args.runs_dir, **hidden)


def done(args: argparse.Namespace, result: dict) -> str:
    logged = f" (MLflow run {result['mlflow_run_id']})" if result["mlflow_run_id"] else ""
    what = "records" if args.kind in (GAMES_KIND, FORMER_GAMES_KIND) else "answers"
    return f"mars: done: {result['records']} {what} in {result['out']}{logged}"
