"""`mars services`: the Prefect server and the MLflow tracking server of the production path,
started together and kept in the foreground until Ctrl-C, SIGTERM or SIGHUP (then both stop).

    mars services [--host 127.0.0.1] [--prefect-port 4200] [--mlflow-port 5000] [--runs-dir runs]
                  [--mlflow-auth]

MLflow serves the same store that local tracking writes (`<runs-dir>/mlflow.db`, artifacts in
`<runs-dir>/mlartifacts/`), so runs tracked before and after are in one place; Prefect keeps
its database in its home (`$PREFECT_HOME`, default ~/.prefect), as `prefect server start` does.
The work pool of `prefect.yaml` (mars-local, type process) is created when missing.

The Prefect server is Prefect's app behind cli/prefect_app.py (Host and Origin checked), with
an API auth string, CSRF tokens and CORS for the UI's origin only; `--mlflow-auth` runs MLflow's
basic-auth app. The credentials live in files of mode 0600 (cli/service_auth.py); the banner
prints the lines that export them. A `--host` other than the loopback needs `--mlflow-auth`.

The tests start their servers with the same code (tests/servers.py): each server is a process
in its own process group (its workers are stopped with it), checked over HTTP before use.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from cli import signals
from cli.service_auth import (MlflowAuth, prefect_auth_file, prefect_export_line,
                              read_secret, secret_in)
from mars_core.config.engine import is_loopback
from mars_core.run.offline import QUIET  # the servers report no usage either

POOL = "mars-local"  # the work pool every deployment in prefect.yaml uses
PREFECT_PORT, MLFLOW_PORT = 4200, 5000  # the servers' own defaults (artifacts.DEFAULT_UI too)


DESCRIPTION = (
    "The Prefect server (UI and API) and the MLflow tracking server, in the foreground until "
    "Ctrl-C, SIGTERM or SIGHUP stops both. The Prefect API asks for an auth string, made once "
    "in $PREFECT_HOME/mars-api-auth-string (mode 0600; the UI asks for it too), refuses a Host "
    "that is not this machine and an Origin that is not its UI, and wants a CSRF token for "
    "every change. The lines that export the credentials to the CLI and to workers are "
    "printed (the secrets themselves never are).")


class ServiceError(Exception):
    """A server that did not start or stopped: one line (with where its log is), and the end
    of its log in `tail`."""

    def __init__(self, line: str, tail: str = ""):
        super().__init__(line)
        self.tail = tail


def port_taken(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


class Process:
    """A command in its own process group, its output appended to `log`; stopping it stops
    everything it started (a server's workers, a worker's flow runs)."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: dict | None = None,
                 cwd: Path | None = None):
        self.name, self.cmd, self.log, self.env, self.cwd = name, cmd, Path(log), env, cwd
        self.proc: subprocess.Popen | None = None

    def launch(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd,
                                         start_new_session=True)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the group, SIGKILL to what is left after `grace_s` (0: SIGKILL at once)."""
        if self.proc is None:
            return
        if grace_s > 0:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._signal(signal.SIGKILL)  # whatever is left of the group (children outlive a leader)
        self.proc.wait()
        self.proc = None

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        """Gone at once, the server and its workers (an outage, not a shutdown)."""
        self.stop(grace_s=0)


class Server(Process):
    """A `Process` that answers `health_url` with 200 once it is ready."""

    def __init__(self, name: str, cmd: list[str], url: str, health: str, log: Path,
                 api_url: str | None = None, env: dict | None = None, cwd: Path | None = None,
                 auth: str | None = None):
        super().__init__(name, cmd, log, env, cwd)
        self.url, self.health_url, self.api_url = url, url + health, api_url or url
        self.port = int(url.rsplit(":", 1)[1].split("/")[0])
        self.auth = auth  # the Prefect API auth string its clients need (None: none)

    def client_env(self) -> dict:
        """What a Prefect client of this server needs in its environment."""
        return {"PREFECT_API_URL": self.api_url,
                **({"PREFECT_API_AUTH_STRING": self.auth} if self.auth else {})}

    def wait_ready(self, timeout: float = 180.0) -> None:
        import httpx

        end = time.time() + timeout
        while True:
            try:
                if httpx.get(self.health_url, timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if not self.running():
                raise ServiceError(f"{self.name} exited while starting (log {self.log})",
                                   self.log_tail())
            if time.time() > end:
                raise ServiceError(f"{self.name} did not answer {self.health_url} in "
                                   f"{timeout:.0f} s (log {self.log})", self.log_tail())
            time.sleep(0.5)

    def start(self, timeout: float = 180.0) -> None:
        self.launch()
        self.wait_ready(timeout)


def start_all(*servers: Server, timeout: float = 180.0) -> None:
    """Launch every server, then wait for each (they start side by side); on a failure the
    ones already launched are stopped."""
    try:
        for s in servers:
            s.launch()
        for s in servers:
            s.wait_ready(timeout)
    except BaseException:
        for s in servers:
            s.kill()
        raise


def _reach(host: str) -> str:
    """Where this machine reaches a server bound to `host` (all interfaces: the loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def _env(**extra: str | None) -> dict:
    env = {**os.environ, **QUIET}
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def prefect_server(port: int, log: Path, host: str = "127.0.0.1", home: Path | None = None,
                   ui: bool = True, scheduler: bool = True, auth: str | None = None) -> Server:
    """The Prefect server as `prefect server start` runs it (API at `<url>/api`, the UI at
    `<url>` when `ui`; its database in `home`, default $PREFECT_HOME), behind the Host and Origin
    guard of cli/prefect_app.py, with CSRF protection, CORS for the UI's origins only and,
    given `auth`, the API auth string every request but the health check must carry."""
    from cli.prefect_app import ui_origins

    cmd = [sys.executable, "-m", "cli.prefect_app", "--host", host, "--port", str(port)]
    url = f"http://{_reach(host)}:{port}"
    # the UI asks this API (by default port 4200, whatever port the server was given)
    env = _env(PREFECT_API_URL=None,
               PREFECT_HOME=str(home) if home else os.environ.get("PREFECT_HOME"),
               PREFECT_SERVER_UI_API_URL=f"{url}/api",
               PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT="false",
               PREFECT_SERVER_UI_ENABLED=str(ui).lower(),
               PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED=str(scheduler).lower(),
               PREFECT_SERVER_CSRF_PROTECTION_ENABLED="true",
               PREFECT_SERVER_CORS_ALLOWED_ORIGINS=",".join(sorted(ui_origins(host, port))),
               PREFECT_SERVER_API_AUTH_STRING=auth, PREFECT_API_AUTH_STRING=auth)
    return Server("Prefect server", cmd, url, "/api/health", log, api_url=f"{url}/api", env=env,
                  auth=auth)


def mlflow_server(port: int, db: Path, artifacts: Path, log: Path, host: str = "127.0.0.1",
                  workers: int = 1, auth_env: dict | None = None) -> Server:
    """`mlflow server` on the SQLite store `db`, artifacts in the folder `artifacts` served
    over HTTP (clients need no access to the folder). Its GenAI job runner (LLM judges, trace
    rollups: eight more processes) is off unless MLFLOW_SERVER_ENABLE_JOB_EXECUTION says
    otherwise; tracking and the registry do not use it. `auth_env` (MlflowAuth.server_env()):
    MLflow's basic-auth app, configured by that environment."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", host, "--port", str(port),
           "--workers", str(workers), "--backend-store-uri", f"sqlite:///{Path(db).resolve()}",
           "--serve-artifacts", "--artifacts-destination", str(Path(artifacts).resolve())]
    cmd += ["--app-name", "basic-auth"] if auth_env else []
    env = _env(MLFLOW_TRACKING_URI=None, **(auth_env or {}))
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    return Server("MLflow server", cmd, f"http://{_reach(host)}:{port}", "/health", log, env=env)


@contextlib.contextmanager
def api_session(api_url: str, auth: str | None):
    """An httpx client of a Prefect API as Prefect's own client talks to it: the auth string
    (basic auth) on every request, a CSRF token (fetched now) on every change."""
    import base64
    import uuid

    import httpx

    headers = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}
    with httpx.Client(base_url=api_url.rstrip("/") + "/", headers=headers, timeout=30) as client:
        me = str(uuid.uuid4())
        got = client.get("csrf-token", params={"client": me})
        if got.status_code == 200:  # 422: CSRF protection off
            client.headers.update({"Prefect-Csrf-Token": got.json()["token"],
                                   "Prefect-Csrf-Client": me})
        yield client


def ensure_work_pool(api_url: str, name: str = POOL, auth: str | None = None) -> bool:
    """The process work pool `name` (as `prefect work-pool create NAME --type process` makes
    it); True when it was created, False when it was there."""
    from prefect.workers.process import ProcessWorker

    with api_session(api_url, auth) as api:
        got = api.get(f"work_pools/{name}")
        if got.status_code == 200:
            return False
        if got.status_code != 404:
            got.raise_for_status()
        api.post("work_pools/", json={
            "name": name, "type": "process",
            "base_job_template": ProcessWorker.get_default_base_job_template()}
        ).raise_for_status()
    return True


def add_parser(sub) -> None:
    s = sub.add_parser("services", help="start the Prefect and MLflow servers (foreground, "
                                        "Ctrl-C stops both)", description=DESCRIPTION)
    s.add_argument("--host", default="127.0.0.1",
                   help="address both bind (default 127.0.0.1); another than the loopback "
                        "needs --mlflow-auth")
    s.add_argument("--prefect-port", type=int, default=PREFECT_PORT,
                   help=f"Prefect server and UI (default {PREFECT_PORT})")
    s.add_argument("--mlflow-port", type=int, default=MLFLOW_PORT,
                   help=f"MLflow tracking server and UI (default {MLFLOW_PORT})")
    s.add_argument("--runs-dir", default="runs",
                   help="MLflow store <runs-dir>/mlflow.db and <runs-dir>/mlartifacts, logs in "
                        "<runs-dir>/services (default: runs)")
    s.add_argument("--mlflow-auth", action="store_true",
                   help="MLflow's basic-auth app (mlflow server --app-name basic-auth): user "
                        "'admin', its password made once in <runs-dir>/services/mlflow-admin-"
                        "password (mode 0600); clients export MLFLOW_TRACKING_USERNAME and "
                        "MLFLOW_TRACKING_PASSWORD. (The Prefect server always asks for the auth "
                        "string in $PREFECT_HOME/mars-api-auth-string.)")


def check(args: argparse.Namespace) -> None:
    from mars_core.config import ConfigError

    if not is_loopback(args.host) and not args.mlflow_auth:
        raise ConfigError(f"--host {args.host} opens both servers to other machines: add "
                          "--mlflow-auth (Prefect always asks for its auth string; MLflow's "
                          "registry would be open to anyone who reaches it)")
    if prefect_auth_file().exists():
        read_secret(prefect_auth_file())  # one line when it is open to others
    if args.mlflow_auth:
        MlflowAuth(Path(args.runs_dir)).check()
    for flag, port, what in (("--prefect-port", args.prefect_port, "a Prefect server"),
                             ("--mlflow-port", args.mlflow_port, "an MLflow server")):
        if not 0 < port < 65536:
            raise ConfigError(f"{flag} must be a port number, got {port}")
        if port_taken(args.host, port):
            raise ConfigError(f"{flag}: {args.host}:{port} is in use ({what} already running? "
                              f"stop it or give another {flag})")
    if args.prefect_port == args.mlflow_port:
        raise ConfigError("--prefect-port and --mlflow-port must differ")


def _say(text: str) -> None:
    try:
        print(text, flush=True)
    except OSError:  # the terminal is gone (SIGHUP): stopping goes on
        pass


def run(args: argparse.Namespace) -> dict:
    """Start both servers, create the work pool, print where they are, wait for Ctrl-C (or
    SIGTERM, SIGHUP, or a server that stops), then stop both with their process groups."""
    signals.handle_like_ctrl_c()
    runs = Path(args.runs_dir).resolve()
    logs = runs / "services"
    logs.mkdir(parents=True, exist_ok=True)
    auth_file = prefect_auth_file()
    prefect = prefect_server(args.prefect_port, logs / "prefect.log", args.host,
                             auth=secret_in(auth_file))
    ml_auth = MlflowAuth(runs) if args.mlflow_auth else None
    mlflow = mlflow_server(args.mlflow_port, runs / "mlflow.db", runs / "mlartifacts",
                           logs / "mlflow.log", args.host, workers=2,
                           auth_env=ml_auth.server_env() if ml_auth else None)
    try:
        start_all(prefect, mlflow)
        created = ensure_work_pool(prefect.api_url, auth=prefect.auth)
        _banner(prefect, mlflow, runs, created, auth_file, ml_auth)
        while True:
            for s in (prefect, mlflow):
                if not s.running():
                    raise ServiceError(f"{s.name} stopped (log {s.log})", s.log_tail(1500))
            time.sleep(1)
    except KeyboardInterrupt:
        _say("mars: stopping the servers")
    except ServiceError as e:
        print(e.tail, file=sys.stderr)
        raise
    finally:
        with signals.deferred():  # a second Ctrl-C (SIGTERM, SIGHUP): still stop both
            for s in (prefect, mlflow):
                s.stop()
    return {"note": "services stopped"}


def _banner(prefect: Server, mlflow: Server, runs: Path, created: bool, auth_file: Path,
            ml_auth: MlflowAuth | None) -> None:
    pool = "created" if created else "already there"
    login = (f"; user admin, password in {ml_auth.password_file}" if ml_auth else
             " (no login: --mlflow-auth asks for one)")
    _say(f"mars: Prefect server {prefect.url} (UI; API {prefect.api_url}), log {prefect.log}; "
         f"the UI asks for the auth string in {auth_file}\n"
         f"mars: MLflow server {mlflow.url} (UI; store {runs / 'mlflow.db'}, artifacts "
         f"{runs / 'mlartifacts'}), log {mlflow.log}{login}\n"
         f"mars: work pool '{POOL}' (process) {pool}\n"
         "In another shell, from the repository root:\n"
         f"  export PREFECT_API_URL={prefect.api_url}\n"
         f"  {prefect_export_line(auth_file)}\n"
         f"  export MLFLOW_TRACKING_URI={mlflow.url}\n"
         + (f"  {ml_auth.export_line()}\n" if ml_auth else "") +
         "  prefect deploy --all                    # once, and after editing prefect.yaml\n"
         f"  prefect worker start --pool {POOL}      # runs what you start from the UI\n"
         "  (or `mars train ...` with these exported: tracked and shown there too)\n"
         "mars: services running; Ctrl-C stops both")


def done(args: argparse.Namespace, result: dict) -> str:
    return f"mars: {result['note']}"
