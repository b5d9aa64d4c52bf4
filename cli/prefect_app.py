"""The Prefect server of `mars services`: Prefect's own ASGI app (what `prefect server start`
serves) under uvicorn, behind a guard that refuses

- a `Host` that is neither an IP address nor a name of this machine (`localhost`, its host
  name): a page on a foreign domain that resolves to this machine (DNS rebinding) gets 400;
- an `Origin` other than the UI's own (http://<a name or address of the server>:<its port>):
  a page of another site gets 403, before Prefect sees the request (a browser sends `Origin`
  with every cross-origin request; Prefect's clients and workers send none).

Prefect's own settings add the rest (cli/services.py sets them): the API auth string
(PREFECT_SERVER_API_AUTH_STRING), CSRF tokens for every change, CORS answers only for the
UI's origins.

    python -m cli.prefect_app --host 127.0.0.1 --port 4200   (run by cli/services.py)

`temporary_app` is the app of the temporary server a `mars` command starts without
PREFECT_API_URL (cli/signals.py): Prefect's own, whose shutdown first lets the server record
what the command sent (`mars services`' server drains the same way, `services_app`). The
command's last task runs reach the server as events that its services (the task-run recorder
above all) write to the database one by one; a command that skips every task (a rerun of a
finished run) sends a burst of them in its last second, and stopping the server then
cancelled the recorder in the middle of a write: two `Error flushing 1 events` ERROR blocks
with ~150 lines of CancelledError traceback after the run's summary, and task runs missing
from the UI. Now the services stop once every event delivered to them
has been handled (`drain_events`), or once the backlog stops shrinking for DRAIN_STALL_S.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import socket
import time
from urllib.parse import urlsplit

DRAIN_STALL_S = 10.0  # a backlog that has not shrunk for this long is left (a message that fails)
DRAIN_POLL_S = 0.05


def _hostname(authority: str) -> str | None:
    """The host of `authority` ("name:port", "[::1]:4200", "1.2.3.4"), lowercased; None when it
    does not parse."""
    try:
        return urlsplit("//" + authority).hostname or None
    except ValueError:
        return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def machine_names(host: str) -> set[str]:
    """The names a request to a server bound to `host` may carry in `Host`, besides any IP
    address: localhost, this machine's names, and `host` itself when it is a name."""
    names = {"localhost", socket.gethostname().lower(), socket.getfqdn().lower()}
    if host and not _is_ip(host.strip("[]")):
        names.add(host.lower())
    return {n for n in names if n}


def ui_origins(host: str, port: int) -> set[str]:
    """The origins the UI is served from: http://<name or loopback/bound address>:<port>."""
    hosts = machine_names(host) | {"127.0.0.1", "[::1]"}
    bound = host.strip("[]")
    if _is_ip(bound) and not ipaddress.ip_address(bound).is_unspecified:
        hosts.add(f"[{bound}]" if ":" in bound else bound)
    return {f"http://{h}:{port}" for h in hosts}


class Guard:
    """ASGI middleware: the Host and Origin checks above, for HTTP and websocket requests."""

    def __init__(self, app, names: set[str], origins: set[str]):
        self.app, self.names, self.origins = app, frozenset(names), frozenset(origins)

    def refusal(self, headers: dict[bytes, bytes]) -> tuple[int, str] | None:
        authority = headers.get(b"host", b"").decode("latin-1")
        host = _hostname(authority)
        if host is None or not (_is_ip(host) or host in self.names):
            return 400, "Invalid host header"
        origin = headers.get(b"origin")
        if origin is not None:
            origin = origin.decode("latin-1").rstrip("/").lower()
            if origin not in self.origins and origin not in (f"http://{authority.lower()}",
                                                             f"https://{authority.lower()}"):
                return 403, "Origin not allowed"
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            refused = self.refusal(dict(scope.get("headers") or []))
            if refused is not None:
                await _refuse(scope, send, *refused)
                return
        await self.app(scope, receive, send)


async def _refuse(scope, send, status: int, text: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": text})
        return
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def event_backlog() -> int:
    """Messages delivered to this server's in-memory subscriptions (events, logs) and not yet
    handled by their consumer: queued, or being handled (Prefect's in-memory broker counts a
    delivery as `published` and a handled message as `consumed`)."""
    from prefect.server.utilities.messaging import memory

    lock = memory._metrics_lock or contextlib.nullcontext()
    with lock:
        return sum(max(0, m["published"] - m["consumed"]) for m in memory.METRICS.values())


async def drain_events(stall_s: float = DRAIN_STALL_S, poll_s: float = DRAIN_POLL_S,
                       backlog=event_backlog) -> int:
    """Wait until `backlog()` is 0, or has not shrunk for `stall_s`; the backlog left."""
    left, since = backlog(), time.monotonic()
    while left and time.monotonic() - since < stall_s:
        await asyncio.sleep(poll_s)
        now = backlog()
        if now < left:
            since = time.monotonic()
        left = now
    return left


def draining(app):
    """`app` (a Starlette/FastAPI app) whose shutdown waits for `drain_events` before its own
    lifespan stops the services that handle the events."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a):
        async with inner(a) as state:
            yield state
            await drain_events()

    app.router.lifespan_context = lifespan
    return app


def temporary_app():
    """uvicorn's factory for the temporary server (cli/signals.py starts it in place of
    `prefect.server.api.server:create_app`, with Prefect's own environment for it)."""
    from prefect.server.api.server import create_app

    return draining(create_app())


def services_app(host: str, port: int) -> Guard:
    """The app of `mars services`' Prefect server: Prefect's, draining its events at shutdown as
    the temporary server's does (a Ctrl-C right after a run no longer cancels the recorder in
    the middle of a write), behind the guard."""
    from prefect.server.api.server import create_app

    return Guard(draining(create_app(final=True)), machine_names(host), ui_origins(host, port))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m cli.prefect_app", description=__doc__)
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)

    import uvicorn
    from prefect.settings import get_current_settings

    api = get_current_settings().server.api
    app = services_app(args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, timeout_keep_alive=api.keepalive_timeout,
                ws_ping_interval=api.websocket_ping_interval,
                ws_ping_timeout=api.websocket_ping_timeout,
                log_level=get_current_settings().server.logging_level.lower())


if __name__ == "__main__":
    main()
