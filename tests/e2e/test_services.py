"""`mars services`: both servers up on the given ports, the work pool made, MLflow on the
runs folder's store, the lines to export printed; Ctrl-C stops both and frees the ports."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from mlflow import MlflowClient

from cli.services import POOL, ensure_work_pool, port_taken
from mars_core.procgroup import free_port
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(600)


def _mars(*args: str, env: dict, out) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", *args], env=env, cwd=REPO,
                            stdout=out, stderr=subprocess.STDOUT, text=True)


def test_services_start_both_servers_and_ctrl_c_stops_them(tmp_path):
    runs, log = tmp_path / "runs", tmp_path / "services.out"
    pp, mp = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "home"),
           "PREFECT_API_URL": "http://127.0.0.1:9/api"}  # a stale export: not asked
    with open(log, "w") as out:
        proc = _mars("services", "--prefect-port", str(pp), "--mlflow-port", str(mp),
                     "--runs-dir", str(runs), env=env, out=out)
    try:
        end = time.time() + 400
        while "services running" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.time() < end, log.read_text()[-3000:]
            time.sleep(0.5)
        text = log.read_text()
        assert f"export PREFECT_API_URL=http://127.0.0.1:{pp}/api" in text
        assert f"export MLFLOW_TRACKING_URI=http://127.0.0.1:{mp}" in text
        assert f"work pool '{POOL}' (process) created" in text
        api = f"http://127.0.0.1:{pp}/api"
        assert httpx.get(f"{api}/health").status_code == 200
        assert httpx.get(f"{api}/work_pools/{POOL}").json()["type"] == "process"
        assert ensure_work_pool(api) is False  # there already: left as it is

        client = MlflowClient(tracking_uri=f"http://127.0.0.1:{mp}")
        exp = client.create_experiment("services-check")
        run = client.create_run(exp)
        (tmp_path / "note.txt").write_text("hello")
        client.log_artifact(run.info.run_id, str(tmp_path / "note.txt"))
        assert (runs / "mlflow.db").is_file()  # the local store's file, served
        assert [p.read_text() for p in (runs / "mlartifacts").rglob("note.txt")] == ["hello"]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C
        rc = proc.wait(timeout=120)
    assert rc == 0, log.read_text()[-3000:]
    assert log.read_text().rstrip().endswith("mars: services stopped")
    assert not port_taken("127.0.0.1", pp) and not port_taken("127.0.0.1", mp)


def test_services_refuse_a_port_in_use_in_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "cli.main", "services", "--prefect-port",
                               str(port), "--runs-dir", str(tmp_path / "runs")],
                              env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"mars: error: --prefect-port: 127.0.0.1:{port} is in use "
                                   "(a Prefect server already running? stop it or give another "
                                   "--prefect-port)")
    assert not (tmp_path / "runs").exists()
