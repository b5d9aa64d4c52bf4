"""`make clean` says what it deletes and deletes only when confirmed, and never the model
registry beside the run folders; `make clean-registry` is the one way to that."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def _make(*args):
    return subprocess.run(["make", "-s", "-C", str(REPO), *args], capture_output=True, text=True)


def test_clean_lists_then_needs_confirm_and_keeps_the_registry(tmp_path):
    runs = tmp_path / "runs"
    for d in ("smoke", "mlartifacts/1"):
        (runs / d).mkdir(parents=True)
    (runs / "mlflow.db").write_text("registry")
    told = _make("clean", f"RUNS={runs}")
    assert told.returncode != 0 and str(runs / "smoke") in told.stdout
    assert (runs / "smoke").is_dir()  # listed, not deleted
    assert _make("clean", f"RUNS={runs}", "CONFIRM=1").returncode == 0
    assert sorted(p.name for p in runs.iterdir()) == ["mlartifacts", "mlflow.db"]
    assert _make("clean-registry", f"RUNS={runs}").returncode != 0 and (runs / "mlflow.db").exists()
    assert _make("clean-registry", f"RUNS={runs}", "CONFIRM=1").returncode == 0
    assert list(runs.iterdir()) == []
