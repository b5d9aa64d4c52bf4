"""Results on the Prefect flow run: tables, Markdown and progress artifacts, each with a link to
the MLflow run that holds the full record.

Prefect keys allow lowercase letters, digits and dashes; a keyed artifact keeps its history
across runs (the UI's Artifacts page shows the latest and the versions before it). Publishing
here never decides a run's outcome: a result that is saved and tracked is not lost because
the Prefect API refused its artifact, so a failure is printed as one warning line.

Keys, titles, descriptions, cells and links are redacted (`mars_core.privacy.redact`): an endpoint's
or a tracking server's URL credentials never reach the Prefect API.
"""
from __future__ import annotations

import inspect
import math
import os
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

from mlflow import MlflowClient

from mars_core.privacy.redact import redact, redact_text

MLFLOW_UI = "MARS_MLFLOW_UI_URL"  # where users open MLflow when tracking to a local store
DEFAULT_UI = "http://127.0.0.1:5000"  # `make mlflow-ui` / `mars services`


def artifact_key(*parts: str) -> str:
    """`('eval', 'Run_1/x')` -> `eval-run-1-x` (Prefect's key alphabet)."""
    text = redact_text("-".join(p for p in parts if p))
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")[:100]


def mlflow_run_url(tracking_uri: str, run_id: str) -> str:
    """The run's page in the MLflow UI: on the tracking server itself, else where
    `$MARS_MLFLOW_UI_URL` (default the local `mlflow ui` port) serves the local store."""
    exp = MlflowClient(tracking_uri=tracking_uri).get_run(run_id).info.experiment_id
    base = tracking_uri if tracking_uri.startswith(("http://", "https://")) \
        else os.environ.get(MLFLOW_UI, DEFAULT_UI)
    return redact_text(f"{_without_credentials(base).rstrip('/')}/#/experiments/{exp}/runs/{run_id}")


def _without_credentials(url: str) -> str:
    """`http://user:pw@host/x?token=t` -> `http://host/x` (a link others may see)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query=""))


def _link_line(tracking_uri: str | None, run_id: str | None) -> str:
    if not (tracking_uri and run_id):
        return ""
    try:
        return f"\n\nMLflow run: [{run_id}]({mlflow_run_url(tracking_uri, run_id)})"
    except Exception as e:  # noqa: BLE001 - a link is a convenience
        return f"\n\nMLflow run: {run_id} ({type(e).__name__})"


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return None if not math.isfinite(v) else round(v, 4)
    return v if isinstance(v, (int, bool)) or v is None else redact_text(str(v))


def _safely(fn, *args, **kwargs) -> UUID | None:
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - see the module docstring
        print(f"warning: Prefect artifact not published ({type(e).__name__}: "
              f"{redact_text(str(e).splitlines()[0][:200]) if str(e) else ''})")
        return None


def publish_table(key: str, rows: list[dict], title: str, tracking_uri: str | None = None,
                  run_id: str | None = None) -> UUID | None:
    """`rows` as a table artifact; its description names it and links the MLflow run."""
    from prefect.artifacts import create_table_artifact

    table = [{k: _cell(v) for k, v in redact(r).items()} for r in rows]
    return _safely(create_table_artifact, table, key=artifact_key(key),
                   description=redact_text(f"**{title}**{_link_line(tracking_uri, run_id)}"))


def publish_markdown(key: str, text: str, title: str, tracking_uri: str | None = None,
                     run_id: str | None = None) -> UUID | None:
    from prefect.artifacts import create_markdown_artifact

    body = redact_text(f"## {title}\n\n{text}{_link_line(tracking_uri, run_id)}")
    return _safely(create_markdown_artifact, body, key=artifact_key(key),
                   description=redact_text(title))


class Progress:
    """A progress artifact (0-100 %) on the flow run, e.g. iterations done."""

    def __init__(self, key: str, done: int, total: int, what: str):
        from prefect.artifacts import create_progress_artifact

        self.total, self.what = max(total, 1), redact_text(what)
        self.id = _safely(create_progress_artifact, self._percent(done), key=artifact_key(key),
                          description=f"{done}/{total} {self.what}")

    def _percent(self, done: int) -> float:
        return 100.0 * min(done, self.total) / self.total

    def update(self, done: int) -> None:
        from prefect.artifacts import update_progress_artifact

        if self.id is not None:
            _safely(update_progress_artifact, self.id, self._percent(done),
                    description=f"{done}/{self.total} {self.what}")


def flush_logs(timeout: float = 30.0) -> None:
    """Send the flow run's queued log lines to the Prefect API now, waiting up to `timeout` s.

    Prefect sends a run's logs from a background worker and, at interpreter exit, waits only
    5 s for what is left: on a loaded machine a deployment run's last lines (its summary) never
    reached the UI. Called as a flow's last step; like publishing, it never decides the run's
    outcome (a failure is one warning line)."""
    try:
        from prefect.logging.handlers import APILogWorker

        pending = APILogWorker.drain_all(timeout=timeout)
        if inspect.iscoroutine(pending):  # only from async code, where this does not wait
            pending.close()
    except Exception as exc:  # noqa: BLE001 - logs are a view; the run's record is kept
        print(f"warning: the flow's last log lines may not reach Prefect: {redact(str(exc))}")
