"""The `mars` command. It drives the flows, so it lives above them.

    mars train --config configs/smoke.yaml [--runs-dir runs] [--run-name NAME] [--set k=v ...]

Running the same command again (same run name) resumes the run where it stopped.
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mars", description="Self-play RL for multi-agent reasoning.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train (or resume) a run from a config preset")
    t.add_argument("--config", required=True, help="YAML preset, e.g. configs/smoke.yaml")
    t.add_argument("--runs-dir", default="runs", help="where runs live (default: runs)")
    t.add_argument("--run-name", default=None, help="run folder name (default: the preset's name)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set rollout.temperature=0.8")
    return p


def _check(args) -> None:
    """Everything that can be refused before a flow starts (one-line errors)."""
    from mars_core.config import load_config
    from mars_core.models import resolve_model
    from tasks.paths import prepare_run_dir

    cfg = load_config(args.config, args.overrides)
    if cfg.model.path != "embedded":
        resolve_model(cfg.model.path)
    name = args.run_name or Path(args.config).stem
    prepare_run_dir(Path(args.runs_dir) / name, cfg)


def main(argv: list[str] | None = None) -> int:
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    args = _parser().parse_args(argv)
    from mars_core.config import ConfigError
    from mars_core.models import ModelError
    from tasks.paths import RunDirError

    try:
        _check(args)
    except (ConfigError, ModelError, RunDirError) as e:
        print(f"mars: error: {e}", file=sys.stderr)
        return 2
    from flows.train import train_flow

    try:
        result = train_flow(config=args.config, run_name=args.run_name, runs_dir=args.runs_dir,
                            overrides=args.overrides)
    except KeyboardInterrupt:
        print("mars: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    except (ConfigError, ModelError, RunDirError) as e:
        print(f"mars: error: {e}", file=sys.stderr)
        return 2
    print(f"mars: done: {result['run_dir']} (MLflow run {result['mlflow_run_id']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
