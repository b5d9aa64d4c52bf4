"""A busy machine delays a run, never fails it: Prefect's temporary API server, started as a
`mars` command starts it (cli/signals.py, with the wait cli/main.py's startup gives it:
mars_core/run/threads.py) with a fresh PREFECT_HOME (its database created and migrated at this
first start) while a second CPU-bound torch process keeps both cores busy, answers."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mars_core.run import threads
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(900)
HOG = ("import torch\na = torch.randn(512, 512)\nprint('ready', flush=True)\n"
       "while True:\n    a @ a")
START = """
import cli.main
from cli import signals
from prefect.server.api import server
signals.start_temporary_server()
print('up', server.SubprocessASGIServer().api_url, flush=True)
"""


def test_the_temporary_server_starts_beside_a_cpu_bound_job(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", threads.PREFECT_STARTUP_TIMEOUT, "PREFECT_API_URL")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # fresh: the database made at start
    hog = subprocess.Popen([sys.executable, "-c", HOG], env=env, stdout=subprocess.PIPE,
                           text=True)
    try:
        assert hog.stdout.readline().strip() == "ready"
        done = subprocess.run([sys.executable, "-c", START], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=800)
        assert hog.poll() is None  # it ran beside the start throughout
    finally:
        hog.kill()
        hog.wait()
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[0] == "up", done.stdout
    assert (tmp_path / "prefect-home" / "prefect.db").is_file()  # made by this start
