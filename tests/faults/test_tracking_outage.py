"""The MLflow tracking server (a real `mlflow server` process, over HTTP) stopped mid-run:
a short outage costs a wait (publishing retries with backoff) and the run finishes; a long one
ends the run with one clear line, keeps every finished stage, and the rerun after the server
is back publishes what is missing, exactly once. Either way the run ends equal to one that
never saw an outage."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from mars_core.run.layout import GENERATE_ROLLOUTS, TRAIN_STEP, stage_dir
from mars_core.run.commit import is_done
from tests.faults.compare_runs import assert_same_run
from tests.faults.conftest import FULL, run_env, train, train_args, wait_for_flag
from tests.servers import mlflow_in, started

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture
def mlflow_server(tmp_path):
    server = mlflow_in(tmp_path)
    started(server)
    yield server
    server.kill()


def _env(prefect_api, server, flag: Path, point: str, window_s: int) -> dict:
    return run_env(prefect_api, MLFLOW_TRACKING_URI=server.url, MARS_TRACKING_RETRY_S=str(window_s),
                   MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="5",
                   MARS_FAULT_WAIT=point, MARS_FAULT_WAIT_FILE=str(flag))



def _train_in_background(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(args, env=env, cwd=Path(__file__).parents[2], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_long_outage_fails_cleanly_and_the_rerun_publishes_what_is_missing(
        tmp_path, tiny_model_dir, prefect_api, reference_run, mlflow_server):
    runs, flag = tmp_path / "runs", tmp_path / "flag"
    args = train_args(runs, "outage", tiny_model_dir)
    env = _env(prefect_api, mlflow_server, flag, f"end:{GENERATE_ROLLOUTS}:0", 4)
    proc = _train_in_background(args, env)
    wait_for_flag(flag, proc)
    mlflow_server.kill()  # the tracking server goes away for longer than the retry window
    flag.unlink()
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("mars: error: MLflow tracking unreachable for 4 s"), last
    assert "run the same command again" in last
    assert is_done(stage_dir(runs / "outage", 0, GENERATE_ROLLOUTS))  # the rollouts are kept
    started(mlflow_server)
    done = train(args, run_env(prefect_api, MLFLOW_TRACKING_URI=mlflow_server.url))
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_run(reference_run, runs / "outage", tracking=mlflow_server.url)


@pytest.mark.skipif(not FULL, reason="make test-faults")
def test_short_outage_costs_a_wait_not_the_run(tmp_path, tiny_model_dir, prefect_api,
                                               reference_run, mlflow_server):
    runs, flag = tmp_path / "runs", tmp_path / "flag"
    args = train_args(runs, "blip", tiny_model_dir)
    env = _env(prefect_api, mlflow_server, flag, f"end:{TRAIN_STEP}:0", 300)
    proc = _train_in_background(args, env)
    wait_for_flag(flag, proc)
    mlflow_server.kill()
    flag.unlink()
    time.sleep(5)  # the run is retrying meanwhile
    started(mlflow_server)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    assert_same_run(reference_run, runs / "blip", tracking=mlflow_server.url)
