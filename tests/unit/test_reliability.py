"""Reliability of the run folder and the tracking glue: plain run names, one process per run
folder, the registry cache keyed by what identifies the weights, evaluation caches keyed by
every setting, secrets kept out of files and MLflow, atomic JSON, checked stage files, and
publishing that retries and resumes exactly once."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from cli.main import main
from mars_core.config import dump_config, load_config
from mars_core.run.layout import (BUILD_PLAYERS, GENERATE_ROLLOUTS, INIT, PREPARE_POLICY, RUN_FILE,
                                  TRAIN_STEP, iter_dir, iter_name, stage_dir)
from mars_core.run.commit import (PUBLISHED, is_done, manifest, stage_output, verify_stage,
                                  write_json)
from tasks.paths import (RunDirError, check_run_name, lock_run_dir, prepare_run_dir,
                         read_config, unlock_run_dir)
from tests.conftest import REPO


# --- run names -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden", "~x", "x y", "", "a\\b", "é"])
def test_bad_run_names_exit_2_before_anything_is_written(tmp_path, capsys, name):
    runs = tmp_path / "runs"
    rc = main(["train", "--config", str(REPO / "configs/smoke.yaml"), "--runs-dir", str(runs),
               "--run-name", name])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--run-name" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no runs/, no mlflow.db anywhere


def test_compare_names_are_checked_too(tmp_path, capsys):
    rc = main(["compare", "--name", "../up", "--runs-dir", str(tmp_path / "runs")])
    assert rc == 2 and "--name" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "up-mars").exists()


@pytest.mark.parametrize("name", ["demo", "run-1", "a.b_c", "X9"])
def test_plain_run_names_pass(name):
    assert check_run_name(name) == name


# --- one process per run folder ----------------------------------------------------------------

_HOLDER = """
import sys, time
from tasks.paths import lock_run_dir
lock_run_dir(sys.argv[1])
print("locked", flush=True)
time.sleep(600)
"""


def test_a_second_process_is_refused_and_a_dead_holders_lock_is_taken_over(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(run)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirError, match=rf"in use by process {holder.pid} on "):
            lock_run_dir(run)
        holder.send_signal(signal.SIGKILL)  # kill -9: no cleanup, the lock file stays
        holder.wait()
        assert (run / ".lock").exists()
        lock_run_dir(run)  # taken over
        lock_run_dir(run)  # re-entrant in one process (a flow calling a flow)
        unlock_run_dir(run)
        unlock_run_dir(run)
    finally:
        holder.kill()


def test_deployments_run_one_at_a_time():
    import yaml

    deployments = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
    for d in deployments:
        limit = d.get("concurrency_limit")
        assert limit and limit["limit"] == 1 and limit["collision_strategy"] == "ENQUEUE", d["name"]


# --- the registry cache ----------------------------------------------------------------------

def _register(store: Path, weights: str) -> str:
    """A model version 1 of `mars-x` in a fresh SQLite store, holding `weights`."""
    uri = f"sqlite:///{store}/mlflow.db"
    store.mkdir(parents=True)
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("x", artifact_location=(store / "art").as_uri())
    run = client.create_run(exp).info
    model = store / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "weights.txt").write_text(weights)
    client.log_artifacts(run.run_id, str(model), "model")
    client.create_registered_model("mars-x")
    mv = client.create_model_version("mars-x", source=f"{run.artifact_uri}/model",
                                     run_id=run.run_id)
    client.set_registered_model_alias("mars-x", "candidate", mv.version)
    assert mv.version in (1, "1")
    return uri


def test_registry_cache_tells_two_stores_v1_apart(tmp_path):
    from tasks.model_registry import download_registered

    a = _register(tmp_path / "a", "weights of store a")
    b = _register(tmp_path / "b", "weights of store b")
    cache = tmp_path / "cache"
    got_a = download_registered("models:/mars-x@candidate", a, cache)
    got_b = download_registered("models:/mars-x@candidate", b, cache)
    assert (got_a / "weights.txt").read_text() == "weights of store a"
    assert (got_b / "weights.txt").read_text() == "weights of store b"
    assert download_registered("models:/mars-x/1", a, cache) == got_a  # cached, same key


# --- evaluation caches -----------------------------------------------------------------------

@pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out (it runs long)
def test_compare_reevaluates_when_its_settings_change(tmp_path, tiny_model_dir):
    from flows.compare import _evaluated
    from mars_core.config import load_game_eval_config

    preset = REPO / "configs/eval/mars_strategic_quick.yaml"
    one = load_game_eval_config(str(preset), ["tic_tac_toe"], ["bot:random"], 1, None,
                                ["play.max_new_tokens=4"])
    two = load_game_eval_config(str(preset), ["tic_tac_toe"], ["bot:random"], 2, None,
                                ["play.max_new_tokens=4"])
    folder = tmp_path / "eval_x"
    first = _evaluated(folder, one, "x", str(tiny_model_dir))
    assert {r["n"] for r in first} == {1}
    assert {r["n"] for r in _evaluated(folder, two, "x", str(tiny_model_dir))} == {2}
    assert _evaluated(folder, one, "x", str(tiny_model_dir)) == first  # reused, not replayed
    assert len(list(tmp_path.glob("eval_x-*"))) == 2


# --- secrets ---------------------------------------------------------------------------------

SECRET = "hf_s3cr3t_v4lue"


def _secret_config():
    return load_config(REPO / "configs/smoke.yaml", [
        f"engine.vllm.launch.env={{HF_TOKEN: {SECRET}, CUDA_VISIBLE_DEVICES: '1'}}",
        f"engine.vllm.url=http://alice:{SECRET}@10.0.0.1:8000"])


def test_secrets_never_reach_config_yaml_or_mlflow(tmp_path):
    from tasks.tracking import ensure_run

    cfg = _secret_config()
    assert SECRET not in dump_config(cfg) and SECRET not in json.dumps(cfg.flat())
    assert cfg.flat()["engine.vllm.launch.env"]["CUDA_VISIBLE_DEVICES"] == "1"
    run = tmp_path / "runs" / "s"
    assert prepare_run_dir(run, cfg) is False
    assert SECRET not in (run / "config.yaml").read_text()
    assert read_config(run).engine.vllm.launch.env["HF_TOKEN"] == SECRET  # this process: real
    run_id = ensure_run(run)
    params = MlflowClient(tracking_uri=f"sqlite:///{run.parent}/mlflow.db").get_run(run_id).data.params
    assert params and not any(SECRET in v for v in params.values())
    assert "alice:***@10.0.0.1" in params["engine.vllm.url"]
    assert prepare_run_dir(run, _secret_config()) is True  # the masked config still resumes


# --- files -----------------------------------------------------------------------------------

def test_stage_marker_records_sizes_and_hashes_and_finds_damage(tmp_path):
    folder = stage_dir(tmp_path, 0, TRAIN_STEP)
    with stage_output(folder) as out:
        (out / "model.safetensors").write_bytes(b"\0" * 4096)
        (out / "sub").mkdir()
        (out / "sub" / "a.json").write_text("{}")
    assert is_done(folder) and set(manifest(folder)) == {"model.safetensors", "sub/a.json"}
    assert verify_stage(folder) is None
    with open(folder / "model.safetensors", "r+b") as f:  # one flipped byte, same size
        f.seek(100)
        f.write(b"\1")
    assert verify_stage(folder, hashes=False) is None
    assert "SHA-256" in verify_stage(folder)
    (folder / "sub" / "a.json").write_text("{} ")
    assert "bytes" in verify_stage(folder, hashes=False)
    (folder / "model.safetensors").unlink()
    assert verify_stage(folder, may_be_gone=lambda rel: rel.endswith(".safetensors")) is not None


def test_a_damaged_stage_and_the_ones_after_it_are_redone(tmp_path):
    from tasks.stage_runner import check_finished_stages

    run = tmp_path / "run"
    for folder in (stage_dir(run, INIT, PREPARE_POLICY), stage_dir(run, 0, GENERATE_ROLLOUTS),
                   stage_dir(run, 0, BUILD_PLAYERS), stage_dir(run, 0, TRAIN_STEP)):
        with stage_output(folder) as out:
            (out / "data.bin").write_bytes(os.urandom(64))
    with open(stage_dir(run, 0, GENERATE_ROLLOUTS) / "data.bin", "r+b") as f:
        f.write(b"\xff\xff")
    check_finished_stages(run)
    assert is_done(stage_dir(run, INIT, PREPARE_POLICY))
    for rel in (GENERATE_ROLLOUTS, BUILD_PLAYERS, TRAIN_STEP):
        assert not (iter_dir(run, 0) / rel).exists()
    kept = list((run / ".damaged").glob(f"*/{iter_name(0)}/{GENERATE_ROLLOUTS}/data.bin"))
    assert len(kept) == 1  # nothing lost: moved aside


def test_write_json_is_atomic(tmp_path):
    path = tmp_path / "state.json"
    write_json(path, {"a": 1})
    with pytest.raises(TypeError):
        write_json(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary left


# --- publishing ------------------------------------------------------------------------------

def test_a_half_published_metric_batch_is_completed_once(tmp_path):
    from mlflow.entities import Metric

    from tasks.tracking import ensure_run, log_metrics_once

    run = tmp_path / "runs" / "m"
    prepare_run_dir(run, load_config(REPO / "configs/smoke.yaml"))
    run_id = ensure_run(run)
    client = MlflowClient(tracking_uri=f"sqlite:///{run.parent}/mlflow.db")
    metrics = {f"m/{i:04d}": float(i) for i in range(1200)}  # three chunks of 500
    first = [Metric(k, v, 0, 3) for k, v in sorted(metrics.items())[:500]]
    client.log_batch(run_id, metrics=first)  # a crash after the first chunk
    assert log_metrics_once(run, metrics, 3) is True
    assert log_metrics_once(run, metrics, 3) is False
    for key in ("m/0000", "m/0499", "m/0500", "m/1199"):
        assert [m.step for m in client.get_metric_history(run_id, key)] == [3]


def test_tracking_outage_is_one_clear_error_after_the_retry_window(tmp_path, monkeypatch):
    from tasks.tracking import TrackingError, ensure_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MARS_TRACKING_RETRY_S", "3")
    run = tmp_path / "runs" / "t"
    prepare_run_dir(run, load_config(REPO / "configs/smoke.yaml"))
    start = time.monotonic()
    with pytest.raises(TrackingError, match=r"unreachable for 3 s .*run the same command again"):
        ensure_run(run)
    assert time.monotonic() - start < 60


def test_publishing_resumes_what_is_missing(tmp_path):
    from tasks.stage_runner import run_stage

    run = tmp_path / "runs" / "p"
    prepare_run_dir(run, load_config(REPO / "configs/smoke.yaml"))
    calls = []

    def body(out):
        calls.append(1)
        (out / "a.md").write_text("a")
        return {"x/y": 1.0}

    run_stage(run, 0, GENERATE_ROLLOUTS, body, step=0, artifacts=("a.md",), artifact_path="it")
    run_stage(run, 0, GENERATE_ROLLOUTS, body, step=0, artifacts=("a.md",), artifact_path="it")
    assert calls == [1]
    ledger = json.loads((stage_dir(run, 0, GENERATE_ROLLOUTS) / PUBLISHED).read_text())
    assert ledger == {"metrics": True, "artifact:a.md": True}
    client = MlflowClient(tracking_uri=f"sqlite:///{run.parent}/mlflow.db")
    run_id = json.loads((run / RUN_FILE).read_text())["run_id"]
    assert [m.step for m in client.get_metric_history(run_id, "x/y")] == [0]
    assert [a.path for a in client.list_artifacts(run_id, "it")] == ["it/a.md"]
