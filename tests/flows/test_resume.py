"""kill -9 at any moment, run the same command again: same final state as an uninterrupted run,
no episode or metric step counted twice. Runs the real CLI in subprocesses on a tiny model."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from mlflow import MlflowClient

from mars_core.stages import is_done
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(900)


def _args(runs: Path, name: str, model: Path) -> list[str]:
    return [sys.executable, "-m", "cli.main", "train", "--config", str(REPO / "configs/smoke.yaml"),
            "--runs-dir", str(runs), "--run-name", name, "--set", f"model.path={model}",
            "--set", "warmup.steps=2", "--set", "warmup.probe_games=1",
            "--set", "evaluation.every=1", "--set", "rollout.episodes_per_iteration=3"]


def _env(prefect_api: str, **extra) -> dict:
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(REPO), **extra}
    return env


def _wait(pred, proc, timeout=600):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        assert proc.poll() is None, f"run ended early with {proc.returncode}"
        time.sleep(0.02)
    raise AssertionError("timed out waiting")


def _kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_kill_inside_and_between_stages_then_resume(tmp_path, tiny_model_dir, prefect_api):
    runs = tmp_path / "runs"
    env = _env(prefect_api)
    ref = subprocess.run(_args(runs, "ref", tiny_model_dir), env=env, cwd=REPO,
                         capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr[-3000:]

    run = runs / "crashy"
    # 1) killed inside train_step of iteration 0 (its work done, no marker yet)
    p = subprocess.Popen(_args(runs, "crashy", tiny_model_dir), cwd=REPO,
                         env=_env(prefect_api, MARS_FAULT_PAUSE="train_step:0"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait(lambda: (run / "iter_0000/train_step.partial/PAUSED").exists(), p)
    _kill(p)
    assert not is_done(run / "iter_0000/train_step")
    # 2) killed right after a stage of iteration 1 finished (between stages)
    p = subprocess.Popen(_args(runs, "crashy", tiny_model_dir), cwd=REPO, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait(lambda: is_done(run / "iter_0001/assign_rewards"), p)
    _kill(p)
    # 3) resumed to the end
    done = subprocess.run(_args(runs, "crashy", tiny_model_dir), env=env, cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

    final = "iter_0001/save_checkpoint/model.safetensors"
    assert _digest(run / final) == _digest(runs / "ref" / final)
    for k in (0, 1):
        ids = pl.read_parquet(run / f"iter_{k:04d}/generate_rollouts/episodes.parquet")["episode_id"]
        assert ids.n_unique() == len(ids) == 3
    client = MlflowClient(tracking_uri=f"sqlite:///{runs}/mlflow.db")
    rid = {r.info.run_name: r.info.run_id for r in client.search_runs(
        [client.get_experiment_by_name("mars-smoke").experiment_id])}
    for key in ("train/loss", "rollout/invalid_action_rate", "time/train_step"):
        hist = client.get_metric_history(rid["crashy"], key)
        assert sorted(m.step for m in hist) == [0, 1], key
    ref_loss = [m.value for m in sorted(client.get_metric_history(rid["ref"], "train/loss"), key=lambda m: m.step)]
    got_loss = [m.value for m in sorted(client.get_metric_history(rid["crashy"], "train/loss"), key=lambda m: m.step)]
    assert got_loss == pytest.approx(ref_loss, rel=1e-6)
    lr = client.get_metric_history(rid["crashy"], "train/lr")
    ref_lr = client.get_metric_history(rid["ref"], "train/lr")
    assert sorted((m.step, m.value) for m in lr) == sorted((m.step, m.value) for m in ref_lr)
    # the same command once more: nothing to do, nothing logged twice
    again = subprocess.run(_args(runs, "crashy", tiny_model_dir), env=env, cwd=REPO,
                           capture_output=True, text=True)
    assert again.returncode == 0
    assert len(client.get_metric_history(rid["crashy"], "train/loss")) == 2
