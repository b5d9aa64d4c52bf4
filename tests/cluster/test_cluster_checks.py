"""The up-front check of a Ray cluster (`cli.checks.check_cluster`), before anything is
written: a port that answers but is not Ray's is one line at once (`ray.init` there retries
for minutes, and the run would have written its folder, MLflow run and warm-up first), and a
Ray cluster with Prefect's temporary server (no PREFECT_API_URL: its 127.0.0.1 URL would go to
the shards on other nodes) is refused naming PREFECT_API_URL, and a cluster with Ray's token
authentication, asked without its token, is one line saying so (`ray.init` waits and then
says only that it failed to connect). Real `mars train` processes."""
from __future__ import annotations

import http.server
import secrets
import sys
import threading

import pytest

from tests.conftest import REPO
from tests.faults.conftest import run_env, train
from tests.raycluster import network_address, two_node_cluster


@pytest.fixture(scope="module")
def http_port():
    """A plain HTTP server (not Ray) on this machine's address, where Ray looks for a
    loopback address too; yields its `host:port`."""
    host = network_address() or "127.0.0.1"
    server = http.server.ThreadingHTTPServer((host, 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"{host}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _train(tmp_path, address: str, env: dict):
    args = [sys.executable, "-m", "cli.main", "train", "--config", str(REPO / "configs/smoke.yaml"),
            "--runs-dir", str(tmp_path / "runs"), "--set", f"cluster.ray.address={address}"]
    done = train(args, env, timeout=300)
    lines = done.stderr.strip().splitlines()
    return done.returncode, lines


def test_a_port_that_is_not_ray_is_one_line_before_anything_is_written(tmp_path, http_port,
                                                                        prefect_api):
    rc, lines = _train(tmp_path, http_port, run_env(prefect_api))
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"mars: error: cannot reach the Ray cluster at '{http_port}'")
    assert "is not a Ray cluster" in lines[0]
    assert not (tmp_path / "runs").exists() and not list(tmp_path.rglob("mlflow.db"))


def test_ray_with_prefects_temporary_server_is_refused_naming_prefect_api_url(tmp_path,
                                                                              http_port):
    env = run_env(None)
    env.pop("PREFECT_API_URL", None)
    rc, lines = _train(tmp_path, http_port, env)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("mars: error: ") and "PREFECT_API_URL is not set" in lines[0]
    assert not (tmp_path / "runs").exists() and not list(tmp_path.rglob("mlflow.db"))


@pytest.mark.full  # `make test`: the two one-line refusals above; a Ray cluster: test_ray_cluster
def test_a_ray_cluster_that_wants_its_token_is_one_line(tmp_path, prefect_api):
    with two_node_cluster(nodes=1, token=secrets.token_hex(32)) as address:
        env = run_env(prefect_api)
        for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            env.pop(name, None)
        env["HOME"] = str(tmp_path / "home")  # no ~/.ray/auth_token either
        rc, lines = _train(tmp_path, address, env)
    assert rc == 2 and len(lines) == 1, lines
    assert "wants its authentication token" in lines[0] and "RAY_AUTH_MODE=token" in lines[0]
    assert not (tmp_path / "runs").exists() and not list(tmp_path.rglob("mlflow.db"))
