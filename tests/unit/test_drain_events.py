"""The temporary Prefect server's shutdown waits for its event backlog (cli/prefect_app.py):
until it is empty, or until it stops shrinking; and `mars` commands start Prefect's server with
that app in place of Prefect's factory (cli/signals.py)."""
from __future__ import annotations

import asyncio

from cli import signals
from cli.prefect_app import drain_events, draining


def test_drain_waits_for_a_shrinking_backlog_to_empty():
    left = iter([5, 4, 4, 3, 2, 1, 0])
    seen = []

    def backlog():
        seen.append(next(left))
        return seen[-1]

    assert asyncio.run(drain_events(stall_s=5.0, poll_s=0.001, backlog=backlog)) == 0
    assert seen[-1] == 0 and len(seen) == 7


def test_drain_gives_up_on_a_backlog_that_no_longer_shrinks():
    assert asyncio.run(drain_events(stall_s=0.05, poll_s=0.001, backlog=lambda: 3)) == 3


def test_an_empty_backlog_does_not_wait():
    assert asyncio.run(drain_events(stall_s=60.0, backlog=lambda: 0)) == 0


def test_the_shutdown_drains_before_the_apps_own_lifespan_ends(monkeypatch):
    from contextlib import asynccontextmanager

    order = []

    @asynccontextmanager
    async def lifespan(app):
        order.append("start")
        yield
        order.append("services stopped")

    class App:
        class router:
            lifespan_context = staticmethod(lifespan)

    async def drained(*a, **k):
        order.append("drained")
        return 0

    monkeypatch.setattr("cli.prefect_app.drain_events", drained)
    app = draining(App())

    async def serve():
        async with app.router.lifespan_context(app):
            order.append("serving")

    asyncio.run(serve())
    assert order == ["start", "serving", "drained", "services stopped"]


def test_the_temporary_server_runs_the_draining_app(monkeypatch):
    started = {}
    monkeypatch.setattr(signals.subprocess, "Popen", lambda *a, **k: started.update(k))
    argv = ["python", "-m", "uvicorn", "--factory", signals.PREFECT_FACTORY, "--port", "1"]
    signals._OwnSession.Popen(args=argv, env={})
    assert started["args"] == [*argv[:4], "cli.prefect_app:temporary_app", "--port", "1"]
    assert started["start_new_session"] is True
    module, name = signals.TEMPORARY_FACTORY.split(":")
    assert callable(getattr(__import__(module, fromlist=[name]), name))
