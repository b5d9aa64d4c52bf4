"""The Prefect API unreachable: at the start (one clear line, nothing written) and mid-run
(a real `prefect server start` process killed during a stage: one clear line, finished stages
kept, and the same command resumes to a run equal to one that never saw the outage)."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from mars_core.run.layout import BANK_EPISODES, BUILD_BATCH, stage_dir
from mars_core.run.commit import MARKER
from tests.conftest import REPO
from tests.faults.compare_runs import assert_same_run
from tests.faults.conftest import FULL, run_env, train, train_args
from tests.servers import prefect_in, started

pytestmark = pytest.mark.timeout(1500)


def test_unreachable_at_start_is_one_line_and_writes_nothing(tmp_path, tiny_model_dir):
    runs = tmp_path / "runs"
    done = train(train_args(runs, "x", tiny_model_dir), run_env("http://127.0.0.1:9/api"))
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("mars: error: the Prefect API at http://127.0.0.1:9/api does not answer")
    assert "Traceback" not in done.stderr and not runs.exists()


@pytest.mark.skipif(not FULL, reason="make test-faults")
def test_lost_mid_run_then_resumed(tmp_path, tiny_model_dir, reference_run):
    server = prefect_in(tmp_path / "prefect")
    api, home = server.api_url, server.env["PREFECT_HOME"]
    try:
        started(server)
        runs, flag = tmp_path / "runs", tmp_path / "flag"
        args = train_args(runs, "lost", tiny_model_dir)
        env = run_env(api, PREFECT_HOME=home, PREFECT_API_AUTH_STRING=server.auth,
                      MARS_FAULT_WAIT=f"start:{BUILD_BATCH}:0",
                      MARS_FAULT_WAIT_FILE=str(flag), PREFECT_CLIENT_MAX_RETRIES="1")
        proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        while not flag.exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        server.kill()  # the Prefect API is gone mid-stage
        flag.unlink()
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 2, err[-3000:]
        # Prefect's own event worker may log its failed deliveries after our line, at exit
        ours = [line for line in err.splitlines() if line.startswith("mars: error:")]
        assert len(ours) == 1 and ours[0].startswith(
            f"mars: error: lost the Prefect API at {api} mid-run"), err[-3000:]
        assert (stage_dir(runs / "lost", 0, BANK_EPISODES) / MARKER).is_file()
    finally:
        server.kill()
    done = train(args, run_env(None))  # resumed on a temporary local server
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_run(reference_run, Path(runs / "lost"))
