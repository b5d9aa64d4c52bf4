"""Issue 49, a clean end: a `mars` command's temporary Prefect server (no PREFECT_API_URL) is
stopped only once it has recorded what the command sent. A flow that runs a burst of task
runs in its last second (a rerun of a finished run skips every task) ends with its own last
line: no `Error flushing ... events` from the server's task-run recorder, no traceback, and
every task run is in the server's database. (Before, the server was stopped with the burst
still queued: two ERROR blocks, ~150 lines of CancelledError, here 19 of 100 task runs
recorded.) The same path serves every command (cli/main.py); the rerun of a real run is in
tests/flows/test_footprint.py."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(600)
N_TASKS = 100
BURST = f"""
import cli.main
from cli import signals
from prefect import flow, task

@task
def step(i):
    return i

@flow
def burst():
    for i in range({N_TASKS}):
        step(i)

signals.handle_like_ctrl_c()
signals.start_temporary_server()
burst()
print("the flow's last line", flush=True)
"""


def noise(output: str) -> list[str]:
    """The lines that should not be there at the end of a successful command."""
    return [line for line in output.splitlines()
            if "ERROR" in line or "Traceback" in line or "CancelledError" in line]


def fresh_prefect_env(home) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def test_a_burst_of_task_runs_is_recorded_before_the_temporary_server_stops(tmp_path):
    done = subprocess.run([sys.executable, "-c", BURST], env=fresh_prefect_env(tmp_path / "ph"),
                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:]
    assert not noise(done.stdout), done.stdout[-3000:]
    assert done.stdout.rstrip().splitlines()[-1] == "the flow's last line"
    with sqlite3.connect(tmp_path / "ph" / "prefect.db") as db:
        states = db.execute("SELECT state_type, count(*) FROM task_run GROUP BY state_type")
        assert dict(states.fetchall()) == {"COMPLETED": N_TASKS}
