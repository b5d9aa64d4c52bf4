"""The `mars` command. It drives the flows, so it lives above them.

    mars train --config configs/smoke.yaml [--overlay configs/scales/smoke.yaml] [--runs-dir runs]
        [--run-name NAME] [--set k=v ...]
    mars compare [--presets A.yaml,B.yaml] [--overlay configs/scales/smoke.yaml] [--set k=v ...]
        [--eval-preset configs/eval/...yaml] [--games G1,G2] [--n N] [--name ablations]
    mars eval strategic --policy SPEC [--preset configs/eval/...yaml] [--games G1,G2]
        [--opponents O1,O2] [--n N] [--seed S] [--out results.json] [--tracking-uri URI]

Running the same `train` command again (same run name) resumes the run where it stopped.
Everything that can be refused (bad config, unknown game or opponent, an opponent that does
not fit a game, a missing model) is refused in one line before a flow starts.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

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
    s.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"),
                   help="MLflow tracking URI to log to (default: $MLFLOW_TRACKING_URI; none: no "
                        "logging)")
    s.add_argument("--experiment", default="mars-strategic-eval")
    s.add_argument("--runs-dir", default="runs",
                   help="local MLflow store for models:/ URIs when no tracking URI is set")
    _overrides(s, "play.max_new_tokens=256")
    return p


def _overrides(p: argparse.ArgumentParser, example: str) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a config value, e.g. --set {example}")


def _overlays(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overlay", dest="overlays", action="append", default=[], metavar="YAML",
                   help="a partial preset merged on top, e.g. configs/scales/smoke.yaml")


def _check_train(args) -> None:
    _check_preset(args.config, args.overlays, args.overrides, Path(args.runs_dir),
                  args.run_name or Path(args.config).stem)


def _check_preset(preset: str, overlays, overrides, runs_dir: Path, name: str) -> None:
    from mars_core.config import load_config
    from mars_core.models import resolve_model
    from tasks.paths import prepare_run_dir

    cfg = load_config(preset, overrides, overlays=overlays)
    if cfg.model.path != "embedded":
        resolve_model(cfg.model.path)
    prepare_run_dir(runs_dir / name, cfg)  # refuses a run made with another config


def _check_compare(args) -> None:
    from mars_core.config import ConfigError, load_strategic_config
    from flows.compare import ABLATIONS

    presets = args.presets or list(ABLATIONS)
    stems = [Path(p).stem for p in presets]
    if len(set(stems)) != len(stems):
        raise ConfigError("--presets: two presets share a file name; rename one")
    if args.n is not None and args.n < 1:
        raise ConfigError(f"--n must be at least 1, got {args.n}")
    for preset, stem in zip(presets, stems):
        _check_preset(preset, args.overlays, args.overrides, Path(args.runs_dir),
                      f"{args.name}-{stem}")
    load_strategic_config(args.eval_preset, args.games, None, args.n, None)


def _check_eval(args) -> None:
    from mars_core.config import ConfigError, load_strategic_config
    from mars_core.evaluation import check_suite
    from mars_core.games.bots import is_bot
    from mars_core.models import resolve_model
    from tasks.tracking import MODEL_URI

    if args.n is not None and args.n < 1:
        raise ConfigError(f"--n must be at least 1, got {args.n}")
    cfg = load_strategic_config(args.preset, args.games, args.opponents, args.n, args.seed,
                                args.overrides)
    try:
        check_suite(cfg.suite, args.policy)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if args.policy.startswith("models:/"):
        if not MODEL_URI.match(args.policy):
            raise ConfigError(f"bad model URI {args.policy!r}: use models:/NAME@ALIAS or "
                              "models:/NAME/VERSION")
    elif not is_bot(args.policy) and args.policy != "embedded":
        resolve_model(args.policy)
    out = Path(args.out)
    if not out.parent.is_dir():
        raise ConfigError(f"--out folder does not exist: {out.parent}")


def main(argv: list[str] | None = None) -> int:
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    args = _parser().parse_args(argv)
    from mars_core.config import ConfigError
    from mars_core.models import ModelError
    from tasks.paths import RunDirError
    from tasks.tracking import RegistryError

    errors = (ConfigError, ModelError, RunDirError, RegistryError)
    try:
        {"train": _check_train, "compare": _check_compare, "eval": _check_eval}[args.command](args)
        result = _run(args)
    except KeyboardInterrupt:
        hint = "; run the same command again to resume" if args.command != "eval" else ""
        print(f"mars: interrupted{hint}", file=sys.stderr)
        return 130
    except errors as e:
        print(f"mars: error: {e}", file=sys.stderr)
        return 2
    if args.command == "train":
        print(f"mars: done: {result['run_dir']} (MLflow run {result['mlflow_run_id']})")
    elif args.command == "compare":
        print(f"mars: done: {len(result['table'])} rows (MLflow run {result['mlflow_run_id']})")
    else:
        logged = f" (MLflow run {result['mlflow_run_id']})" if result["mlflow_run_id"] else ""
        print(f"mars: done: {result['records']} records in {result['out']}{logged}")
    return 0


def _run(args) -> dict:
    if args.command == "train":
        from flows.train import train_flow

        return train_flow(config=args.config, run_name=args.run_name, runs_dir=args.runs_dir,
                          overrides=args.overrides, overlays=args.overlays)
    if args.command == "compare":
        from flows.compare import compare_flow

        return compare_flow(presets=args.presets, overlays=args.overlays, overrides=args.overrides,
                            eval_preset=args.eval_preset, games=args.games, n=args.n,
                            name=args.name, runs_dir=args.runs_dir, experiment=args.experiment)
    from flows.evaluate import strategic_eval_flow

    return strategic_eval_flow(
        policy=args.policy, preset=args.preset, games=args.games, opponents=args.opponents,
        n=args.n, seed=args.seed, out=args.out, overrides=args.overrides,
        tracking_uri=args.tracking_uri, experiment=args.experiment, runs_dir=args.runs_dir)


if __name__ == "__main__":
    sys.exit(main())
