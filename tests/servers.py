"""Real servers for tests: `prefect server start`, `mlflow server`, a Prefect worker and
`mlflow models serve`, each a process group on a free port with its log in a temporary folder
(started by cli/services.py, the code `mars services` uses; the Prefect server asks for its
auth string as there). Stop them in a finalizer:
`stop()` shuts one down, `kill()` takes it away at once (an outage)."""
from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from mars_core.run.procgroup import free_port
from cli.services import (POOL, Process, Server, ServiceError, mlflow_server,
                          prefect_server, start_all)

__all__ = ["POOL", "Process", "Server", "ServiceError", "started", "mlflow_in", "prefect_in",
           "worker", "model_server", "mars_cmd"]

_DEFAULT_SIGNALS = ("import os, signal, sys\n"
                    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n"
                    "    signal.signal(s, signal.SIG_DFL)\n"
                    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def mars_cmd(*args: str) -> list[str]:
    """`mars ARGS` as a terminal starts it, to be signalled: Ctrl-C, SIGTERM and SIGHUP at
    their defaults even when the tests run in the background or under nohup (which ignore
    them, and an ignored signal stays ignored in the children); the same process (exec)."""
    return [sys.executable, "-c", _DEFAULT_SIGNALS, "-m", "cli.main", *args]


def started(*servers: Server, timeout: float = 180.0) -> None:
    """Start the servers side by side; one that does not come up fails the test with the end
    of its log (the others are stopped)."""
    try:
        start_all(*servers, timeout=timeout)
    except ServiceError as e:
        raise AssertionError(f"{e}\n{e.tail}") from None


def mlflow_in(root: Path) -> Server:
    """`mlflow server` on `root/mlflow.db`, artifacts served from `root/artifacts` (not started);
    `start()` again after `kill()` brings it back on the same port."""
    root.mkdir(parents=True, exist_ok=True)
    return mlflow_server(free_port(), root / "mlflow.db", root / "artifacts", root / "mlflow.log")


def prefect_in(root: Path, ui: bool = False, scheduler: bool = False) -> Server:
    """The Prefect server of `mars services` (guarded, CSRF on, an API auth string of its own:
    `server.auth`, `server.client_env()` for its clients) with its own PREFECT_HOME in `root`
    (not started). No scheduler by default: a test server never starts scheduled runs (the
    nightly deployment's) by itself."""
    root.mkdir(parents=True, exist_ok=True)
    return prefect_server(free_port(), root / "prefect.log", home=root / "home", ui=ui,
                          scheduler=scheduler, auth=secrets.token_urlsafe(32))


def worker(log: Path, env: dict, cwd: Path, pool: str = POOL) -> Process:
    """`prefect worker start --pool POOL` (env: PREFECT_API_URL, PREFECT_API_AUTH_STRING and
    what its flow runs need)."""
    return Process("Prefect worker", [sys.executable, "-m", "prefect", "worker", "start",
                                      "--pool", pool], log, env=env, cwd=cwd)


def model_server(model_uri: str, log: Path, env: dict) -> Server:
    """`mlflow models serve -m MODEL_URI --env-manager local` (env: MLFLOW_TRACKING_URI);
    ready when /ping answers (after the model is downloaded and loaded). It runs `uvicorn`
    from PATH: the environment's bin folder goes first, as in an activated virtualenv. MLflow
    downloads a `models:/` URI into a new temporary folder it never removes (0.5 GB for the
    embedded model): TMPDIR is a folder beside the log, which goes with the test's."""
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)
    tmp = log.parent / "serve-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**env, "PATH": os.pathsep.join([bin_dir, env.get("PATH", os.defpath)]),
           "TMPDIR": str(tmp)}
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri, "--env-manager",
           "local", "--host", "127.0.0.1", "-p", str(port)]
    return Server("mlflow models serve", cmd, f"http://127.0.0.1:{port}", "/ping", log, env=env)
