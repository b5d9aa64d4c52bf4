"""Prefect retries a stage task only when it failed while publishing to a tracking server that
stayed down (its files are committed, so the retry only publishes); a bug is not retried."""
from __future__ import annotations

from prefect import flow, task

from tasks.stage_runner import PUBLISH_RETRY
from tasks.tracking import TrackingError


def test_publishing_failures_are_retried_once_and_bugs_never(prefect_api):
    calls = {"publishing": 0, "bug": 0}
    retry = {**PUBLISH_RETRY, "retry_delay_seconds": 0}

    @task(**retry)
    def publishing() -> str:
        calls["publishing"] += 1
        if calls["publishing"] == 1:
            raise TrackingError("MLflow tracking unreachable for 4 s")
        return "published"

    @task(**retry)
    def bug() -> None:
        calls["bug"] += 1
        raise ValueError("a bug")

    @flow
    def both() -> tuple[str, str]:
        first = publishing()
        try:
            bug()
        except ValueError as e:
            return first, str(e)
        return first, ""

    assert both() == ("published", "a bug")
    assert calls == {"publishing": 2, "bug": 1}
