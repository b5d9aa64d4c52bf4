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
"""
from __future__ import annotations

import argparse
import ipaddress
import socket
from urllib.parse import urlsplit


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m cli.prefect_app", description=__doc__)
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)

    import uvicorn
    from prefect.server.api.server import create_app
    from prefect.settings import get_current_settings

    api = get_current_settings().server.api
    app = Guard(create_app(final=True), machine_names(args.host),
                ui_origins(args.host, args.port))
    uvicorn.run(app, host=args.host, port=args.port, timeout_keep_alive=api.keepalive_timeout,
                ws_ping_interval=api.websocket_ping_interval,
                ws_ping_timeout=api.websocket_ping_timeout,
                log_level=get_current_settings().server.logging_level.lower())


if __name__ == "__main__":
    main()
