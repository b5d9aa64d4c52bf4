"""The temporary Prefect server's shutdown waits for its event backlog (cli/prefect_app.py):
until it is empty, or until it stops shrinking; `mars` commands start Prefect's server with
that app in place of Prefect's factory (cli/signals.py), and `mars services`' server drains too."""
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


def _lifespan_order(monkeypatch):
    """(an app with a lifespan, a function that serves it and returns what happened in order)"""
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

    def serve(app):
        async def go():
            async with app.router.lifespan_context(app):
                order.append("serving")

        asyncio.run(go())
        return order

    return App(), serve


def test_the_shutdown_drains_before_the_apps_own_lifespan_ends(monkeypatch):
    app, serve = _lifespan_order(monkeypatch)
    assert serve(draining(app)) == ["start", "serving", "drained", "services stopped"]


def test_the_services_server_drains_behind_its_guard(monkeypatch):
    import prefect.server.api.server as server

    from cli.prefect_app import Guard, services_app

    app, serve = _lifespan_order(monkeypatch)
    made = []
    monkeypatch.setattr(server, "create_app", lambda **k: made.append(k) or app)
    guarded = services_app("127.0.0.1", 4200)
    assert isinstance(guarded, Guard) and guarded.app is app and made == [{"final": True}]
    assert "http://127.0.0.1:4200" in guarded.origins
    assert serve(guarded.app) == ["start", "serving", "drained", "services stopped"]


def test_the_temporary_server_runs_the_draining_app(monkeypatch):
    started = {}
    monkeypatch.setattr(signals.subprocess, "Popen", lambda *a, **k: started.update(k))
    argv = ["python", "-m", "uvicorn", "--factory", signals.PREFECT_FACTORY, "--port", "1"]
    signals._OwnSession.Popen(args=argv, env={})
    assert started["args"] == [*argv[:4], "cli.prefect_app:temporary_app", "--port", "1"]
    assert started["start_new_session"] is True
    module, name = signals.TEMPORARY_FACTORY.split(":")
    assert callable(getattr(__import__(module, fromlist=[name]), name))
