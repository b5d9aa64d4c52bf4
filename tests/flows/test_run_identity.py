"""A run is its folder's random id (created with `config.yaml`), not the folder's path: a folder
deleted and made again is a new MLflow run with its own params and a new model version with its
own weights; a resume against a store that lacks the run is one line naming both stores."""
from __future__ import annotations

import hashlib
import json
import shutil

from mlflow import MlflowClient

from cli.main import main
from mars_core.config import load_config
from mars_core.run.layout import RUN_FILE, checkpoint_dir
from tasks.paths import prepare_run_dir, run_key
from tests.conftest import REPO

SMOKE = str(REPO / "configs/smoke.yaml")


def _sets(model, lr: str) -> list[str]:
    # one iteration, no warm-up, no evaluation; the entropy bonus gives the tiny model's
    # (all alike) replies a gradient, so the two learning rates give two different models
    sets = [f"model.path={model}", "model.max_context_tokens=1024", "run.iterations=1",
            "rollout.max_new_tokens=8", "warmup.steps=0", "warmup.probe_games=0",
            "evaluation.every=0", "algorithm.entropy_coef=0.5", f"optim.lr={lr}"]
    return [a for s in sets for a in ("--set", s)]


def _weights(folder) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_a_deleted_run_folder_made_again_is_a_new_run_and_a_new_version(
        tmp_path, prefect_api, tiny_model_dir, capsys, monkeypatch):
    from tasks.model_registry import download_registered

    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    runs, run = tmp_path / "runs", tmp_path / "runs" / "demo"
    train = ["train", "--config", SMOKE, "--runs-dir", str(runs), "--run-name", "demo"]
    assert main([*train, *_sets(tiny_model_dir, "1e-5")]) == 0, capsys.readouterr().err[-2000:]
    old_key, old_run = run_key(run), json.loads((run / RUN_FILE).read_text())["run_id"]
    old_weights = _weights(checkpoint_dir(run, 0))
    shutil.rmtree(run)  # `rm -rf runs/demo`, then the same name with another learning rate
    assert main([*train, *_sets(tiny_model_dir, "1e-2")]) == 0, capsys.readouterr().err[-2000:]
    new_key, new_run = run_key(run), json.loads((run / RUN_FILE).read_text())["run_id"]
    new_weights = _weights(checkpoint_dir(run, 0))
    assert new_weights != old_weights

    store = f"sqlite:///{runs.resolve()}/mlflow.db"
    client = MlflowClient(tracking_uri=store)
    assert new_run != old_run  # a new MLflow run, with the new params
    assert client.get_run(new_run).data.params["optim.lr"] == "0.01"
    assert client.get_run(old_run).data.params["optim.lr"] == "1e-05"  # untouched
    mv = client.get_model_version_by_alias("mars-smoke", "candidate")
    assert (int(mv.version), mv.run_id) == (2, new_run)  # a new version, of the new run
    served = download_registered("models:/mars-smoke@candidate", store, tmp_path / "dl")
    assert _weights(served) == new_weights  # `candidate` serves the new run's checkpoint
    assert new_key != old_key == client.get_run(old_run).data.tags["mars.key"]
    assert client.get_run(new_run).data.tags["mars.key"] == new_key == mv.tags["mars.key"]


def test_a_rerun_of_the_same_folder_keeps_its_id(tmp_path):
    run = tmp_path / "runs" / "r"
    cfg = load_config(SMOKE)
    assert prepare_run_dir(run, cfg) is False
    key = run_key(run)
    assert len(key) == 32 and key != str(run.resolve())
    assert prepare_run_dir(run, cfg) is True and run_key(run) == key
    shutil.rmtree(run)
    prepare_run_dir(run, cfg)
    assert run_key(run) != key


def test_resuming_against_another_store_is_one_line_naming_both(tmp_path, prefect_api,
                                                               tiny_model_dir, capsys,
                                                               monkeypatch):
    from tasks.tracking import ensure_run

    runs = tmp_path / "runs"
    sets = ["--set", f"model.path={tiny_model_dir}"]
    prepare_run_dir(runs / "moved", load_config(SMOKE, [f"model.path={tiny_model_dir}"]))
    first = f"sqlite:///{tmp_path}/first.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", first)
    ensure_run(runs / "moved")  # the run is made in the first store (then, say, a crash)
    other = f"sqlite:///{tmp_path}/other.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", other)
    rc = main(["train", "--config", SMOKE, "--runs-dir", str(runs), "--run-name", "moved", *sets])
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("mars:")]  # beside MLflow's INFO logs
    assert rc == 2 and "Traceback" not in err, err[-3000:]
    assert line.startswith("mars: error: run folder ") and "is not in" in line
    assert first in line and other in line and "MLFLOW_TRACKING_URI" in line
