"""MLflow glue: one run per training run, idempotent metric logging, the model registry.

Default backend: `sqlite:///<runs_dir>/mlflow.db` with artifacts in `<runs_dir>/mlartifacts`;
`MLFLOW_TRACKING_URI` points it elsewhere (a server). Every logging call is safe to repeat after
a crash: a metric batch whose step is already recorded is skipped, so a resumed run never
logs a step twice.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from mars_core.stages import read_json, write_json
from tasks.paths import read_config

RUN_FILE = "mlflow_run.json"


def tracking_uri(runs_dir: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(runs_dir).resolve()}/mlflow.db"


def client_for(run_dir: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=tracking_uri(Path(run_dir).parent))


def _experiment_id(client: MlflowClient, name: str, runs_dir: Path) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        location = (Path(runs_dir).resolve() / "mlartifacts").as_uri()
    return client.create_experiment(name, artifact_location=location)


def _find_or_create_run(client: MlflowClient, exp: str, name: str, tags: dict) -> str:
    """A run is found by its `mars.key` tag before one is created, so a crash between
    creating it and noting its id locally never leaves a second run behind."""
    found = client.search_runs([exp], f"tags.`mars.key` = '{tags['mars.key']}'", max_results=1)
    if found:
        return found[0].info.run_id
    return client.create_run(exp, run_name=name, tags=tags).info.run_id


def ensure_run(run_dir: Path) -> str:
    """The MLflow run id of this training run, created (with the config as params) once."""
    run_dir = Path(run_dir)
    path = run_dir / RUN_FILE
    if path.is_file():
        return read_json(path)["run_id"]
    cfg = read_config(run_dir)
    client = client_for(run_dir)
    exp = _experiment_id(client, cfg.tracking.experiment, run_dir.parent)
    key = str(run_dir.resolve())
    run_id = _find_or_create_run(client, exp, run_dir.name, {"mars.key": key, "mars.run_dir": key})
    params = [Param(k, str(v)[:6000]) for k, v in cfg.flat().items()]
    logged = client.get_run(run_id).data.params
    params = [p for p in params if p.key not in logged]
    for i in range(0, len(params), 100):
        client.log_batch(run_id, params=params[i:i + 100])
    write_json(path, {"run_id": run_id, "experiment_id": exp})
    return run_id


def nested_run(run_dir: Path, label: str) -> str:
    """A child run (for an evaluation), created once per label."""
    run_dir = Path(run_dir)
    path = run_dir / f"mlflow_nested_{label}.json"
    if path.is_file():
        return read_json(path)["run_id"]
    parent = ensure_run(run_dir)
    exp = read_json(run_dir / RUN_FILE)["experiment_id"]
    run_id = _find_or_create_run(client_for(run_dir), exp, f"{run_dir.name}/{label}",
                                 {"mlflow.parentRunId": parent,
                                  "mars.key": f"{run_dir.resolve()}#{label}"})
    write_json(path, {"run_id": run_id})
    return run_id


def log_metrics_once(run_dir: Path, metrics: dict[str, float], step: int,
                     run_id: str | None = None) -> bool:
    """Log a batch at `step` unless this batch was logged already (a resumed stage).
    The batch is one transaction, so checking its first key is enough."""
    if not metrics:
        return False
    client = client_for(run_dir)
    run_id = run_id or ensure_run(run_dir)
    first = sorted(metrics)[0]
    if any(m.step == step for m in client.get_metric_history(run_id, first)):
        return False
    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, step) for k, v in sorted(metrics.items())]
    for i in range(0, len(batch), 500):
        client.log_batch(run_id, metrics=batch[i:i + 500])
    return True


def log_artifacts(run_dir: Path, local: Path, artifact_path: str, run_id: str | None = None) -> None:
    client = client_for(run_dir)
    run_id = run_id or ensure_run(run_dir)
    if Path(local).is_dir():
        client.log_artifacts(run_id, str(local), artifact_path)
    else:
        client.log_artifact(run_id, str(local), artifact_path)


def set_terminated(run_dir: Path, run_id: str, status: str = "FINISHED") -> None:
    client_for(run_dir).set_terminated(run_id, status)


def register_model(run_dir: Path, model_dir: Path, name: str, alias: str) -> int:
    """Log a model folder as the run's `model` artifact, register it as a new version of
    `name` and point `alias` at it. Idempotent per run directory."""
    run_dir = Path(run_dir)
    done = run_dir / "registered.json"
    if done.is_file():
        return int(read_json(done)["version"])
    client = client_for(run_dir)
    run_id = ensure_run(run_dir)
    source = f"{client.get_run(run_id).info.artifact_uri}/model"
    if not client.search_registered_models(filter_string=f"name='{name}'"):
        client.create_registered_model(name)
    mine = client.search_model_versions(f"name='{name}' and run_id='{run_id}'")
    if mine:  # registered before a crash: reuse that version
        mv = max(mine, key=lambda v: int(v.version))
    else:
        client.log_artifacts(run_id, str(model_dir), "model")
        mv = client.create_model_version(name, source=source, run_id=run_id)
    client.set_registered_model_alias(name, alias, mv.version)
    write_json(done, {"name": name, "version": int(mv.version), "alias": alias, "source": source})
    return int(mv.version)
