"""The `mars` command. It drives the flows, so it lives above them.

    mars train --config configs/smoke.yaml [--overlay configs/scales/smoke.yaml] [--runs-dir runs]
        [--run-name NAME] [--set k=v ...]
    mars compare [--presets A.yaml,B.yaml] [--overlay configs/scales/smoke.yaml] [--set k=v ...]
        [--eval-preset configs/eval/...yaml] [--games G1,G2] [--n N] [--name ablations]
    mars eval strategic --policy SPEC [--preset configs/eval/...yaml] [--games G1,G2]
        [--opponents O1,O2] [--n N] [--seed S] [--out results.json] [--tracking-uri URI]
    mars eval mas --model SPEC [--baseline SPEC] [--systems single,mad,autogen]
        [--benchmarks B1,B2] [--limit N] [--max-tokens N] [--out results.json]
        [--data-dir DIR|hf://] [--gpqa-path FILE] [--tracking-uri URI]
    mars eval harness --model SPEC [--benchmarks B1,B2] [--limit N] [--max-tokens N] [--out F]
        (lm-evaluation-harness, the `eval` extra; same benchmark files and graders)
    mars arena [--preset configs/arena/...yaml] [--agents A,LABEL=SPEC,...] [--run RUN_DIR]
        [--games G1,G2] [--schedule round_robin|sampled] [--n N] [--matches M] [--seed S]
        [--reference POOL.yaml] [--save-pool POOL.yaml] [--out arena.json] [--tracking-uri URI]
        (TrueSkill leaderboard; --reference scores newcomers against a frozen pool)
    mars replay RUN [--episode ID] [--iteration K] [--out FILE] [--tracking-uri URI]
        (one episode as an HTML page; RUN: a run/iteration/episodes folder or runs:/ID/PATH)
    mars services [--host H] [--prefect-port 4200] [--mlflow-port 5000] [--runs-dir runs]
        (the Prefect and MLflow servers in the foreground until Ctrl-C; the work pool)

Running the same `train` command again (same run name) resumes the run where it stopped.
Everything that can be refused (bad config, unknown game or opponent, an opponent that does
not fit a game, a missing model) is refused in one line before a flow starts.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cli import arena, replay, services

QUIET_ENV = {
    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false",
}
POLICY_HELP = ("embedded, a model or checkpoint folder, models:/NAME@ALIAS, or a bot "
               "(bot:random, bot:mcts-N, bot:nash)")


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mars", description="Self-play RL for multi-agent reasoning.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train (or resume) a run from a config preset")
    t.add_argument("--config", required=True, help="YAML preset, e.g. configs/smoke.yaml")
    t.add_argument("--runs-dir", default="runs", help="where runs live (default: runs)")
    t.add_argument("--run-name", default=None, help="run folder name (default: the preset's name)")
    _overlays(t)
    _overrides(t, "rollout.temperature=0.8")
    c = sub.add_parser("compare", help="train several presets, evaluate each, log one table")
    c.add_argument("--presets", type=_csv, default=None,
                   help="comma-separated presets (default: the four in configs/ablations/)")
    c.add_argument("--eval-preset", default="configs/eval/mars_strategic_quick.yaml",
                   help="strategic evaluation preset (default: the quick MARS suite)")
    c.add_argument("--games", type=_csv, default=None, help="evaluate on these games only")
    c.add_argument("--n", type=int, default=None, help="evaluation games per game x opponent x seat")
    c.add_argument("--name", default="ablations",
                   help="runs are <name>-<preset>, the table in <runs-dir>/<name>-compare")
    c.add_argument("--runs-dir", default="runs", help="where runs live (default: runs)")
    c.add_argument("--experiment", default="mars-ablations", help="MLflow experiment of the table")
    _overlays(c)
    _overrides(c, "run.iterations=2")
    e = sub.add_parser("eval", help="evaluate a policy").add_subparsers(dest="kind", required=True)
    s = e.add_parser("strategic", help="strength against fixed opponents (the MARS protocol)")
    s.add_argument("--policy", required=True, help=POLICY_HELP)
    s.add_argument("--preset", default=None,
                   help="evaluation preset YAML (default: the full MARS suite, 1000 games)")
    s.add_argument("--games", type=_csv, default=None, help="comma-separated games to play")
    s.add_argument("--opponents", type=_csv, default=None,
                   help="comma-separated opponents: bot:random, bot:mcts-N, bot:nash, self")
    s.add_argument("--n", type=int, default=None, help="games per game x opponent x seat")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--out", default="results.json", help="records file (default: results.json)")
    _tracking_args(s, "mars-strategic-eval")
    _overrides(s, "play.max_new_tokens=256")
    _mas_parser(e)
    replay.add_parser(sub)
    arena.add_parser(sub, _csv, _tracking_args, _overrides)
    services.add_parser(sub)
    return p


MODEL_HELP = ("embedded, a model or checkpoint folder, models:/NAME@ALIAS, or an OpenAI-compatible "
              "endpoint such as a vLLM server (http://host:port[#MODEL])")


def _mas_parser(e) -> None:
    m = e.add_parser("mas", help="reasoning benchmarks inside multi-agent systems (debate, "
                                 "assistant/user proxy, single agent)")
    m.add_argument("--baseline", default=None,
                   help="a second model for the comparison table (same forms as --model)")
    m.add_argument("--systems", type=_csv, default=["single", "mad", "autogen"],
                   help="comma-separated systems: single, mad, autogen (default: all)")
    _benchmark_args(m, "mas_results.json", 32, "in-process engine batch (an endpoint gets 8x "
                                               "this many requests at once)")
    m.add_argument("--shards", type=int, default=1,
                   help="split the questions into this many shards, each with its own engine "
                        "(default 1)")
    m.add_argument("--ray-address", default=None,
                   help="run the shards on this Ray cluster (auto, host:6379 or ray://host:10001)")
    h = e.add_parser("harness", help="single-agent numbers through lm-evaluation-harness "
                                     "(the eval extra), on the same benchmark files")
    _benchmark_args(h, "harness_results.json", 8, "lm-eval batch (an endpoint: concurrent "
                                                  "requests)")


def _benchmark_args(m, out: str, batch: int, batch_help: str) -> None:
    m.add_argument("--model", required=True, help=MODEL_HELP)
    m.add_argument("--benchmarks", type=_csv, default=None,
                   help="comma-separated: math500, gsm8k, aqua, aime24, amc23, mmlu_stem, "
                        "gpqa_diamond (default: the six shipped ones)")
    m.add_argument("--limit", type=int, default=None,
                   help="questions per benchmark, spread evenly over the file (default: all)")
    m.add_argument("--max-tokens", type=int, default=8192, help="tokens per reply (default 8192)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--batch-size", type=int, default=batch, help=batch_help)
    m.add_argument("--data-dir", default=None,
                   help="benchmark folder (default: $MARS_BENCHMARK_DIR, else ../shared/data/"
                        "benchmarks), or hf:// to load each benchmark from its publisher's "
                        "dataset on the Hugging Face hub (hf://MIRROR: a local copy of those "
                        "dataset repositories, MIRROR/<owner>/<name>)")
    m.add_argument("--gpqa-path", default=None,
                   help="your GPQA-Diamond CSV (gated: read in place, never copied or logged)")
    m.add_argument("--out", default=out, help=f"results file (default: {out})")
    _tracking_args(m, "mars-mas-eval")


def _tracking_args(p: argparse.ArgumentParser, experiment: str) -> None:
    p.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"),
                   help="MLflow tracking URI to log to (default: $MLFLOW_TRACKING_URI; none: no "
                        "logging)")
    p.add_argument("--experiment", default=experiment)
    p.add_argument("--runs-dir", default="runs",
                   help="local MLflow store for models:/ URIs when no tracking URI is set")


def _overrides(p: argparse.ArgumentParser, example: str) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a config value, e.g. --set {example}")


def _overlays(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overlay", dest="overlays", action="append", default=[], metavar="YAML",
                   help="a partial preset merged on top, e.g. configs/scales/smoke.yaml")


def _check_train(args) -> None:
    from tasks.paths import check_run_name

    given = args.run_name is not None
    check_run_name(args.run_name if given else Path(args.config).stem,
                   "--run-name" if given else "the preset's file name (give --run-name)")
    _check_preset(args.config, args.overlays, args.overrides, Path(args.runs_dir),
                  args.run_name if given else Path(args.config).stem)


def _check_preset(preset: str, overlays, overrides, runs_dir: Path, name: str) -> None:
    from mars_core.config import load_config
    from mars_core.models import resolve_model
    from tasks.paths import lock_run_dir, prepare_run_dir

    cfg = load_config(preset, overrides, overlays=overlays)
    if cfg.model.path != "embedded":
        resolve_model(cfg.model.path)
    _check_cluster(cfg.cluster.ray.address)
    lock_run_dir(runs_dir / name)  # held by this process until it exits (the flow re-enters it)
    prepare_run_dir(runs_dir / name, cfg)  # refuses a run made with another config


def _check_cluster(address: str | None) -> None:
    """A Ray address that does not answer is one line now, before anything is written."""
    if address is not None:
        from tasks.shards import reachable

        reachable(address)


def _check_compare(args) -> None:
    from mars_core.config import ConfigError, load_strategic_config
    from flows.compare import ABLATIONS

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
        _check_preset(preset, args.overlays, args.overrides, Path(args.runs_dir),
                      f"{args.name}-{stem}")
    load_strategic_config(args.eval_preset, args.games, None, args.n, None)


def _check_model_spec(spec: str, flag: str, endpoint_ok: bool = True) -> None:
    from mars_core.config import ConfigError
    from mars_core.models import resolve_model
    from mars_core.engines.chat import is_endpoint
    from tasks.registry import MODEL_URI

    if is_endpoint(spec) and not endpoint_ok:
        raise ConfigError(f"{flag}: an endpoint URL cannot play games here; give a model folder "
                          "or models:/ URI")
    if spec.startswith("models:/"):
        if not MODEL_URI.match(spec):
            raise ConfigError(f"{flag}: bad model URI {spec!r}: use models:/NAME@ALIAS or "
                              "models:/NAME/VERSION")
    elif not is_endpoint(spec) and spec != "embedded":
        resolve_model(spec)


def _check_mas(args) -> None:
    from eval.benchmarks import SHIPPED, BenchmarkError, check_names, data_dir
    from eval.systems import check_systems
    from mars_core.config import ConfigError

    for flag, value in (("--limit", args.limit), ("--max-tokens", args.max_tokens),
                        ("--batch-size", args.batch_size), ("--shards", getattr(args, "shards", 1))):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}")
    try:
        check_systems(getattr(args, "systems", []))
        check_names(args.benchmarks or list(SHIPPED), args.gpqa_path)
        if any(b != "gpqa_diamond" for b in args.benchmarks or SHIPPED):
            data_dir(args.data_dir)
    except (ValueError, BenchmarkError) as e:
        raise ConfigError(str(e)) from None
    if args.gpqa_path and not args.gpqa_path.startswith("hf://") and not Path(args.gpqa_path).is_file():
        raise ConfigError(f"--gpqa-path: no such file: {args.gpqa_path}")
    _check_model_spec(args.model, "--model")
    if getattr(args, "baseline", None):
        _check_model_spec(args.baseline, "--baseline")
    if not Path(args.out).parent.is_dir():
        raise ConfigError(f"--out folder does not exist: {Path(args.out).parent}")
    _check_cluster(getattr(args, "ray_address", None))


def _check_eval(args) -> None:
    if args.kind in ("mas", "harness"):
        return _check_mas(args)
    from mars_core.config import ConfigError, load_strategic_config
    from mars_core.evaluation import check_suite
    from mars_core.games.bots import is_bot

    if args.n is not None and args.n < 1:
        raise ConfigError(f"--n must be at least 1, got {args.n}")
    cfg = load_strategic_config(args.preset, args.games, args.opponents, args.n, args.seed,
                                args.overrides)
    try:
        check_suite(cfg.suite, args.policy)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not is_bot(args.policy):
        _check_model_spec(args.policy, "--policy", endpoint_ok=False)
    out = Path(args.out)
    if not out.parent.is_dir():
        raise ConfigError(f"--out folder does not exist: {out.parent}")
    _check_cluster(cfg.cluster.ray.address)


def _prefect_api_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def check_prefect_api() -> None:
    """With a Prefect server configured (PREFECT_API_URL), refuse in one line when it does not
    answer, before anything is written (without one, Prefect runs a temporary local server)."""
    import httpx

    from mars_core.config import ConfigError
    from mars_core.redact import redact_text

    url = _prefect_api_url()
    if not url:
        return
    try:
        httpx.get(url.rstrip("/") + "/health", timeout=10).raise_for_status()
    except httpx.HTTPError as e:
        raise ConfigError(f"the Prefect API at {redact_text(url)} does not answer ({type(e).__name__}"
                          "): start it (`make prefect-ui`) or unset PREFECT_API_URL to run with a "
                          "temporary local server") from None


def _prefect_outage(e: BaseException) -> str | None:
    """The one line for a run that lost its Prefect API mid-way (None: another error)."""
    import httpx

    url = _prefect_api_url()
    seen = e
    while seen is not None:
        if isinstance(seen, httpx.TransportError) or "Failed to reach API" in str(seen):
            from mars_core.redact import redact_text

            return (f"lost the Prefect API at {redact_text(url or 'the Prefect server')} mid-run "
                    f"({type(seen).__name__}); finished stages are saved: run the same command "
                    "again to resume")
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return None


def main(argv: list[str] | None = None) -> int:
    # Offline unless told otherwise; `hf://` (benchmarks from their publishers) asks for the hub.
    hub = any("hf://" in a for a in (sys.argv[1:] if argv is None else argv))
    for k, v in QUIET_ENV.items():
        if not (hub and k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
            os.environ.setdefault(k, v)
    args = _parser().parse_args(argv)
    from mars_core.config import ConfigError
    from mars_core.models import ModelError
    from mars_core.stages import StageError
    from tasks.paths import RunDirError
    from tasks.registry import RegistryError
    from tasks.shards import ClusterError
    from tasks.tracking import TrackingError

    from mars_core.engines.vllm_server import VLLMError
    from eval.benchmarks import BenchmarkError

    errors = (ConfigError, ModelError, RunDirError, RegistryError, StageError, TrackingError,
              BenchmarkError, ClusterError,
              VLLMError, services.ServiceError)
    try:
        if args.command not in ("replay", "services"):
            check_prefect_api()
        {"train": _check_train, "compare": _check_compare, "eval": _check_eval,
         "replay": replay.check, "arena": arena.check,
         "services": services.check}[args.command](args)
        result = _run(args)
    except KeyboardInterrupt:
        resumable = args.command in ("train", "compare")
        hint = "; run the same command again to resume" if resumable else ""
        print(f"mars: interrupted{hint}", file=sys.stderr)
        return 130
    except errors as e:
        print(f"mars: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        lost = _prefect_outage(e)
        if lost is None:
            raise
        print(f"mars: error: {lost}", file=sys.stderr)
        return 2
    if args.command == "train":
        print(f"mars: done: {result['run_dir']} (MLflow run {result['mlflow_run_id']})")
    elif args.command == "replay":
        print(f"mars: {result['note']}\nmars: done: {result['out']}")
    elif args.command == "services":
        print(f"mars: {result['note']}")
    elif args.command == "arena":
        logged = f" (MLflow run {result['mlflow_run_id']})" if result["mlflow_run_id"] else ""
        print(f"mars: done: {result['records']} games, leaderboard in {result['out']}{logged}")
    elif args.command == "compare":
        print(f"mars: done: {len(result['table'])} rows (MLflow run {result['mlflow_run_id']})")
    else:
        logged = f" (MLflow run {result['mlflow_run_id']})" if result["mlflow_run_id"] else ""
        what = "records" if args.kind == "strategic" else "answers"
        print(f"mars: done: {result['records']} {what} in {result['out']}{logged}")
    return 0


def _run(args) -> dict:
    if args.command == "services":
        return services.run(args)
    if args.command == "replay":
        return replay.run(args)
    if args.command == "arena":
        return arena.run(args)
    if args.command == "train":
        from flows.train import train_flow

        return train_flow(config=args.config, run_name=args.run_name, runs_dir=args.runs_dir,
                          overrides=args.overrides, overlays=args.overlays)
    if args.command == "compare":
        from flows.compare import compare_flow

        return compare_flow(presets=args.presets, overlays=args.overlays, overrides=args.overrides,
                            eval_preset=args.eval_preset, games=args.games, n=args.n,
                            name=args.name, runs_dir=args.runs_dir, experiment=args.experiment)
    if args.kind == "harness":
        from flows.evaluate import harness_eval_flow

        return harness_eval_flow(
            model=args.model, benchmarks=args.benchmarks, limit=args.limit, out=args.out,
            data_dir=args.data_dir, gpqa_path=args.gpqa_path, max_tokens=args.max_tokens,
            seed=args.seed, batch_size=args.batch_size, tracking_uri=args.tracking_uri,
            experiment=args.experiment, runs_dir=args.runs_dir)
    if args.kind == "mas":
        from flows.evaluate import mas_eval_flow

        return mas_eval_flow(
            model=args.model, baseline=args.baseline, systems=args.systems,
            benchmarks=args.benchmarks, limit=args.limit, out=args.out, data_dir=args.data_dir,
            gpqa_path=args.gpqa_path, max_tokens=args.max_tokens, seed=args.seed,
            batch_size=args.batch_size, tracking_uri=args.tracking_uri,
            experiment=args.experiment, runs_dir=args.runs_dir, shards=args.shards,
            ray_address=args.ray_address)
    from flows.evaluate import strategic_eval_flow

    return strategic_eval_flow(
        policy=args.policy, preset=args.preset, games=args.games, opponents=args.opponents,
        n=args.n, seed=args.seed, out=args.out, overrides=args.overrides,
        tracking_uri=args.tracking_uri, experiment=args.experiment, runs_dir=args.runs_dir)


if __name__ == "__main__":
    sys.exit(main())
