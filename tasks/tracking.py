"""MLflow glue: one run per training run, idempotent metric logging, the model registry.

Default backend: `sqlite:///<runs_dir>/mlflow.db` with artifacts in `<runs_dir>/mlartifacts`;
`MLFLOW_TRACKING_URI` points it elsewhere (a server). Every logging call is safe to repeat after
a crash: a metric batch whose step is already recorded is skipped, so a resumed run never
logs a step twice. Stages commit their files before anything is published, and every call
here is retried with exponential backoff (tenacity) for `MARS_TRACKING_RETRY_S` seconds
(default 300): a short outage of the tracking server costs a wait, a long one a clear error
and a rerun that publishes what is missing.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Callable

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from tenacity import (RetryError, retry, retry_if_exception, stop_after_delay,
                      wait_exponential)

from mars_core.games.catalog import file_name
from mars_core.run.layout import CONFIG_FILE, RUN_FILE
from mars_core.privacy.redact import redact, redact_text
from mars_core.run.commit import fault_point, read_json, write_json
from tasks.paths import read_config, run_key

# MLflow errors that no retry can fix (a bad request, a missing or duplicate resource)
_PERMANENT = ("INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST", "RESOURCE_ALREADY_EXISTS",
              "INVALID_STATE", "PERMISSION_DENIED", "UNAUTHENTICATED", "BAD_REQUEST")


class TrackingError(Exception):
    """The tracking server stayed unreachable for the whole retry window (one-line message)."""


def _transient(e: BaseException) -> bool:
    """An error a retry can fix: MLflow's own (but a bad request or a missing resource), a
    connection or timeout, a locked or unreachable database. Anything else is a bug to see."""
    import requests
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import OperationalError

    if isinstance(e, MlflowException):
        return e.error_code not in _PERMANENT
    return isinstance(e, (requests.exceptions.RequestException, ConnectionError, TimeoutError,
                          OperationalError))


def as_params(params: dict) -> list[Param]:
    """MLflow params with every secret masked (mars_core.privacy.redact), values cut to 6,000
    chars, names in MLflow's alphabet (a game named `openspiel:liars_dice(numdice=1)` in a
    suite's key: `_metric_key`)."""
    return [Param(_metric_key(str(k)), str(v)[:6000]) for k, v in redact(params).items()]


def retry_window_s() -> float:
    return float(os.environ.get("MARS_TRACKING_RETRY_S", "300"))


RESUME = ("finished stages are saved: run the same command again to resume and publish what "
          "is missing")


def retrying(fn=None, *, then: str = RESUME):
    """Retry `fn` (idempotent) with exponential backoff (1 s doubling up to 30 s) while its
    errors look transient, for `MARS_TRACKING_RETRY_S` seconds; then one TrackingError that
    ends with `then` (what to do). `@retrying` or `@retrying(then=...)`."""
    if fn is None:
        return functools.partial(retrying, then=then)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        window = retry_window_s()
        attempt = retry(retry=retry_if_exception(_transient), stop=stop_after_delay(window),
                        wait=wait_exponential(multiplier=1, min=1, max=30), reraise=False)(fn)
        try:
            return attempt(*args, **kwargs)
        except RetryError as e:
            last = e.last_attempt.exception()
            first = (str(last).strip().splitlines() or [type(last).__name__])[0][:300]
            raise TrackingError(
                f"MLflow tracking unreachable for {window:.0f} s ({fn.__name__}: "
                f"{redact_text(first)}); {then}") from None
    return wrapper


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str, bool]:
    """(commit, has local changes) of the code that runs, or ("unknown", False) outside git."""
    repo = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                                 "--untracked-files=no"], capture_output=True, text=True,
                                timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown", False
    return commit, bool(status.strip())


def code_tags() -> dict[str, str]:
    """The code a run ran (git commit, local changes): on training and evaluation runs."""
    commit, dirty = git_state()
    return {"mlflow.source.git.commit": commit, "mars.git.dirty": str(dirty).lower()}


def lineage_tags(cfg) -> dict[str, str]:
    """What a training run came from: the code (git commit, local changes) and the base model."""
    return {**code_tags(), "mlflow.source.name": "mars train",
            "mars.base_model": redact_text(cfg.model.path)}


def tracking_uri(runs_dir: Path) -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(runs_dir).resolve()}/mlflow.db"
    return quiet_links(uri)


def quiet_links(uri: str) -> str:
    """`uri`; when it holds credentials, MLflow stops printing each finished run's link on
    stdout (it prints the tracking URI as given, password and all; the flows print their own
    lines, masked)."""
    if redact_text(uri) != uri:
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    return uri


def client_for(run_dir: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=tracking_uri(Path(run_dir).parent))


def _experiment_id(client: MlflowClient, name: str, runs_dir: Path | None) -> str:
    """The experiment's id, created on first use. A local SQLite store keeps its artifacts
    in `mlartifacts/` beside the database (MLflow's default would be ./mlruns in the CWD)."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None
    if runs_dir is not None and not os.environ.get("MLFLOW_TRACKING_URI"):
        location = (Path(runs_dir).resolve() / "mlartifacts").as_uri()
    elif client.tracking_uri.startswith("sqlite:///"):
        db = Path(client.tracking_uri.removeprefix("sqlite:///"))
        location = (db.resolve().parent / "mlartifacts").as_uri()
    return client.create_experiment(name, artifact_location=location)


def _find_or_create_run(client: MlflowClient, exp: str, name: str, tags: dict) -> str:
    """A run is found by its `mars.key` tag (the run folder's random key, `tasks.paths.run_key`)
    before one is created, so a crash between creating it and noting its id locally never
    leaves a second run behind, and a new folder of the same name never finds an old run."""
    found = client.search_runs([exp], f"tags.`mars.key` = '{tags['mars.key']}'", max_results=1)
    if found:
        return found[0].info.run_id
    return client.create_run(exp, run_name=name, tags=tags).info.run_id


_CHECKED: set[tuple[str, str]] = set()  # (run folder, store) whose MLflow run was found


def _noted_run(run_dir: Path, client: MlflowClient) -> str:
    """The MLflow run id noted in the run folder, checked once per process to be in the store
    this process tracks to: a resume against another store is one line naming both."""
    from mlflow.exceptions import MlflowException

    noted = read_json(run_dir / RUN_FILE)
    seen = (str(run_dir.resolve()), client.tracking_uri)
    if seen not in _CHECKED:
        try:
            client.get_run(noted["run_id"])
        except MlflowException as e:
            if e.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            there = noted.get("tracking")
            raise TrackingError(
                f"run folder {run_dir} was tracked in {there or 'another tracking store'}, but "
                f"its MLflow run {noted['run_id']} is not in {redact_text(client.tracking_uri)}: "
                f"resume with MLFLOW_TRACKING_URI set to {there or 'the store it was made in'}, "
                "or start a new run with another --run-name") from None
        _CHECKED.add(seen)
    return noted["run_id"]


@retrying
def ensure_run(run_dir: Path) -> str:
    """The MLflow run id of this training run, created once with the config as params (and as
    `config.yaml`, secrets masked) and its lineage as tags, found by the folder's random key
    (`mars.key`)."""
    run_dir = Path(run_dir)
    path = run_dir / RUN_FILE
    client = client_for(run_dir)
    if path.is_file():
        return _noted_run(run_dir, client)
    cfg = read_config(run_dir)
    exp = _experiment_id(client, cfg.tracking.experiment, run_dir.parent)
    where = str(run_dir.resolve())
    run_id = _find_or_create_run(client, exp, run_dir.name,
                                 {"mars.key": run_key(run_dir), "mars.run_dir": where})
    fault_point("mid:ensure_run:init")
    params = as_params(cfg.flat())
    logged = client.get_run(run_id).data.params
    params = [p for p in params if p.key not in logged]
    for i in range(0, len(params), 100):
        client.log_batch(run_id, params=params[i:i + 100])
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in lineage_tags(cfg).items()])
    client.log_artifact(run_id, str(run_dir / CONFIG_FILE))
    write_json(path, {"run_id": run_id, "experiment_id": exp,
                      "tracking": redact_text(client.tracking_uri)})
    _CHECKED.add((where, client.tracking_uri))
    return run_id


@retrying
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
                                  "mars.key": f"{run_key(run_dir)}#{label}",
                                  "mars.run_dir": str(run_dir.resolve())})
    write_json(path, {"run_id": run_id})
    return run_id


@retrying
def log_metrics_once(run_dir: Path, metrics: dict[str, float], step: int,
                     run_id: str | None = None) -> bool:
    """Log a batch at `step` unless this batch was logged already (a resumed stage).
    The batch is one transaction, so checking its first key is enough."""
    if not metrics:
        return False
    client = client_for(run_dir)
    run_id = run_id or ensure_run(run_dir)
    now = int(time.time() * 1000)
    batch = [Metric(_metric_key(k), float(v), now, step) for k, v in sorted(metrics.items())]
    logged = False
    for i in range(0, len(batch), 500):  # each chunk is one transaction: check its first key
        chunk = batch[i:i + 500]
        if any(m.step == step for m in client.get_metric_history(run_id, chunk[0].key)):
            continue
        client.log_batch(run_id, metrics=chunk)
        logged = True
    return logged


@retrying
def log_artifacts(run_dir: Path, local: Path, artifact_path: str, run_id: str | None = None) -> None:
    client = client_for(run_dir)
    run_id = run_id or ensure_run(run_dir)
    if Path(local).is_dir():
        client.log_artifacts(run_id, str(local), artifact_path)
    else:
        client.log_artifact(run_id, str(local), artifact_path)


@retrying
def log_dataset(run_dir: Path, path: Path, context: str, run_id: str | None = None) -> None:
    """A Parquet table the run read or produced (episodes, turns) as an MLflow dataset input:
    its source path, digest, schema and row count, so a metric traces back to its data."""
    import mlflow.data
    import polars as pl
    from mlflow.entities import DatasetInput, InputTag

    from mars_core.run import offline

    offline.quiet_logs()  # MLflow's "source can be interpreted in multiple ways" (a local path)
    path = Path(path)
    frame = pl.read_parquet(path)
    name = f"{Path(run_dir).name}/{path.parent.parent.name}/{path.stem}"
    dataset = mlflow.data.from_polars(frame, source=str(path.resolve()), name=name)
    run_id = run_id or ensure_run(run_dir)
    client_for(run_dir).log_inputs(run_id, datasets=[DatasetInput(
        dataset._to_mlflow_entity(), tags=[InputTag("mlflow.data.context", context)])])


@retrying
def _set_terminated(run_dir: Path, run_id: str, status: str) -> None:
    client_for(run_dir).set_terminated(run_id, status)


def set_terminated(run_dir: Path, run_id: str, status: str = "FINISHED") -> None:
    """Close the MLflow run. A FAILED mark is best effort, once (the run is failing already,
    perhaps because tracking is down; the resumed run closes it)."""
    if status == "FINISHED":
        return _set_terminated(run_dir, run_id, status)
    try:
        client_for(run_dir).set_terminated(run_id, status)
    except Exception:  # noqa: BLE001 - never hide the error that failed the run
        pass


def _metric_key(*parts: str) -> str:
    """MLflow metric names allow letters, digits, `_ - . / space`: `bot:mcts-100` -> `bot_mcts-100`."""
    return "/".join(re.sub(r"[^\w\-. /]", "_", p) for p in parts)


def log_one_run(tracking: str | MlflowClient, experiment: str, name: str, tags: dict, *,
                params: dict | None = None, metrics=(), tables: dict[str, list[dict]] | None = None,
                files=(), folders: dict[str, Path] | None = None, parent: str | None = None,
                then: Callable[[MlflowClient, str, str], None] | None = None) -> str:
    """One finished MLflow run, the shape of every evaluation's record: created in
    `experiment` with the run name `name` and `tags`, secrets masked (a nested run of
    `parent` where one is given; the code's git commit and local-changes flag added), then
    params (masked), metrics (`{key: value}` or (key, value) pairs, step 0), tables (artifact
    file -> rows), files (at the root), folders (artifact path -> folder), then
    `then(client, experiment_id, run_id)` (nested runs, traces) before the run is closed.
    Returns its id."""
    import pandas as pd

    client = tracking if isinstance(tracking, MlflowClient) else MlflowClient(
        tracking_uri=quiet_links(tracking))
    exp = _experiment_id(client, experiment, None)
    tags = {**code_tags(), **({"mlflow.parentRunId": parent} if parent else {}), **tags}
    run_id = client.create_run(exp, run_name=redact_text(name), tags=redact(tags)).info.run_id
    client.log_batch(run_id, params=as_params(params or {}))
    now = int(time.time() * 1000)
    pairs = metrics.items() if isinstance(metrics, dict) else metrics
    client.log_batch(run_id, metrics=[Metric(_metric_key(k), float(v), now, 0)
                                      for k, v in pairs])
    for artifact_file, rows in (tables or {}).items():
        client.log_table(run_id, pd.DataFrame(rows), artifact_file)
    for f in files:
        client.log_artifact(run_id, str(f))
    for path, folder in (folders or {}).items():
        client.log_artifacts(run_id, str(folder), path)
    if then is not None:
        then(client, exp, run_id)
    client.set_terminated(run_id)
    return run_id


GAME_EVAL_KEYS = ("normalized_return", "mean_return", "ci95", "win_rate", "draw_rate", "loss_rate",
                  "invalid_rate")


def log_game_eval(tracking: str, experiment: str, policy: str, params: dict,
                  records: list[dict], files: list[Path],
                  exploitability: dict[str, dict] | None = None) -> str:
    """One MLflow run for a game evaluation (params, per-game normalized returns, the
    table, radar chart and transcripts) with a nested run per game holding that game's table
    and per-seat metrics; `exploitability` (game -> `mars_core.strength.exploitability`'s
    figures, and Tic-Tac-Toe's worst case: `mars_core.strength.worst_case`) adds
    `exploitability/<game>` and `worst_case/<game>` (normalized, 0-100). Returns the parent
    run id."""
    from mars_core.strength.suite import per_game_normalized

    policy = redact_text(policy)
    kind = {"mars.kind": "strategic-eval"}
    scores = per_game_normalized(records)
    metrics = {_metric_key("normalized_return", g): v for g, v in scores.items()}
    metrics["normalized_return/mean"] = sum(scores.values()) / len(scores)
    metrics |= {_metric_key("exploitability", g): r["exploitability"]
                for g, r in (exploitability or {}).items() if "exploitability" in r}
    metrics |= {_metric_key("worst_case", g): r["normalized"]  # Tic-Tac-Toe's, 0-100
                for g, r in (exploitability or {}).items() if "worst_case" in r}

    def per_game(client: MlflowClient, exp: str, parent: str) -> None:
        for game in scores:
            mine = [r for r in records if r["game"] == game]
            log_one_run(client, experiment, f"strategic {policy} / {game}",
                        {**kind, "mars.game": game}, parent=parent,
                        metrics=[(_metric_key(r["opponent"], f"seat{r['seat']}", key), r[key])
                                 for r in mine for key in GAME_EVAL_KEYS],
                        tables={f"{file_name(game)}_results.json": mine})

    return log_one_run(tracking, experiment, f"strategic {policy}", {**kind, "mars.policy": policy},
                       params=params, metrics=metrics, tables={"strategic_results.json": records},
                       files=files, then=per_game)


def log_comparison(tracking: str, experiment: str, name: str, params: dict, rows: list[dict],
                   files: list[Path]) -> str:
    """One MLflow run holding a comparison table: the params, one metric per policy and game
    (`normalized_return/<policy>/<game>`), the table (MLflow table + files). Returns its id."""
    metrics = [(_metric_key("normalized_return", r["policy"], col), v)
               for r in rows for col, v in r.items() if col != "policy" and v is not None]
    return log_one_run(tracking, experiment, f"compare {name}", {"mars.kind": "comparison"},
                       params=params, metrics=metrics, tables={"comparison_table.json": rows},
                       files=files)
