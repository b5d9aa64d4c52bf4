"""The fault-injection suite: kill -9 at every stage point, tracking and orchestration outages,
a full disk, concurrent runs, hostile grader input. `make test` runs a representative slice;
`make test-faults` (MARS_FAULTS_FULL=1) runs all of it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

FULL = os.environ.get("MARS_FAULTS_FULL") == "1"


def train_args(runs: Path, name: str, model: Path, *extra: str) -> list[str]:
    """`mars train` on the smoke preset with the tiny model: two iterations, the start and every
    iteration evaluated, so every kind of stage runs."""
    return [sys.executable, "-m", "cli.main", "train", "--config", str(REPO / "configs/smoke.yaml"),
            "--runs-dir", str(runs), "--run-name", name, "--set", f"model.path={model}",
            "--set", "warmup.steps=2", "--set", "warmup.probe_games=1",
            "--set", "evaluation.every=1", "--set", "evaluation.at_start=true",
            "--set", "rollout.episodes_per_iteration=3", *extra]


def run_env(prefect_api: str | None, **extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), **extra}
    env.pop("MARS_FAULT_KILL", None)
    if prefect_api:
        env["PREFECT_API_URL"] = prefect_api
    env.update(extra)
    return env


def wait_for_flag(flag: Path, proc: subprocess.Popen, timeout: float = 600) -> None:
    """Wait until a run reaches its MARS_FAULT_WAIT point (it writes `flag` and waits there)."""
    import time

    end = time.time() + timeout
    while not flag.exists():
        assert proc.poll() is None, f"run ended early: {proc.communicate()[1][-2000:]}"
        assert time.time() < end, "the run never reached its fault point"
        time.sleep(0.1)


def train(args: list[str], env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory, tiny_model_dir, prefect_api) -> Path:
    """One uninterrupted run that faulted runs are compared with (runs/ref)."""
    runs = tmp_path_factory.mktemp("faults-ref")
    done = train(train_args(runs, "ref", tiny_model_dir), run_env(prefect_api))
    assert done.returncode == 0, done.stderr[-3000:]
    return runs / "ref"


OVERLAP = ("--set", "rollout.overlap=true")


@pytest.fixture(scope="session")
def overlap_reference_run(tmp_path_factory, tiny_model_dir, prefect_api) -> Path:
    """One uninterrupted run with `rollout.overlap` (iteration 1's games played while
    iteration 0 trains), for the kill points of that path (runs/ref-overlap)."""
    runs = tmp_path_factory.mktemp("faults-ref-overlap")
    done = train(train_args(runs, "ref-overlap", tiny_model_dir, *OVERLAP), run_env(prefect_api))
    assert done.returncode == 0, done.stderr[-3000:]
    return runs / "ref-overlap"
