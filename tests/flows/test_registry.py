"""Registered models are MLflow transformers models: MLflow loads and serves them as chat
models, our engines get a plain Hugging Face folder back, the weights are on disk once, and
the version carries its lineage."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from mlflow import MlflowClient

from mars_core.config import load_config
from tasks.paths import prepare_run_dir
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(600)


def _final_model(tmp_path: Path, tiny_model_dir: Path) -> tuple[Path, Path]:
    """A run folder and its final model folder (plain HF files + the MLflow model inside)."""
    from tasks.model_registry import MLFLOW_DIR, model_card, save_mlflow_model

    run = tmp_path / "runs" / "reg"
    prepare_run_dir(run, load_config(REPO / "configs/smoke.yaml",
                                     ["tracking.registered_model=tiny-chat"]))
    model = run / "final" / "model"
    model.mkdir(parents=True)
    for f in tiny_model_dir.iterdir():
        os.link(f, model / f.name)
    save_mlflow_model(model, model / MLFLOW_DIR, model_card(run, str(tiny_model_dir), "embedded"))
    return run, model


def test_final_model_is_an_mlflow_chat_model_with_its_weights_once(tmp_path, tiny_model_dir):
    import mlflow.pyfunc
    import mlflow.transformers

    _, model = _final_model(tmp_path, tiny_model_dir)
    flavored = model / "mlflow"
    assert "llm/v1/chat" in (flavored / "MLmodel").read_text()
    weights = flavored / "model" / "model.safetensors"
    assert weights.stat().st_ino == (model / "model.safetensors").stat().st_ino  # a link, not a copy
    assert "chat_template" in "".join(p.name for p in (flavored / "components/tokenizer").iterdir())
    parts = mlflow.transformers.load_model(str(flavored), return_type="components")
    assert parts["model"].num_parameters() > 0 and parts["tokenizer"].chat_template
    reply = mlflow.pyfunc.load_model(str(flavored)).predict(
        {"messages": [{"role": "user", "content": "Your move?"}], "max_tokens": 4})
    assert isinstance(reply[0]["choices"][0]["message"]["content"], str)
    assert reply[0]["usage"]["completion_tokens"] <= 4


def test_registered_version_resolves_through_mlflow_with_lineage(tmp_path, tiny_model_dir):
    import mlflow.transformers

    from mars_core.models.weights import load_tokenizer
    from tasks.model_registry import download_registered, register_model
    from tasks.tracking import git_state

    run, model = _final_model(tmp_path, tiny_model_dir)
    lineage = {"mars.parent_checkpoint": str(tiny_model_dir), "mars.base_model": "embedded"}
    version = register_model(run, model / "mlflow", "tiny-chat", "candidate", lineage)
    assert register_model(run, model / "mlflow", "tiny-chat", "candidate", lineage) == version

    store = f"sqlite:///{run.parent}/mlflow.db"
    client = MlflowClient(tracking_uri=store)
    mv = client.get_model_version_by_alias("tiny-chat", "candidate")
    assert mv.tags["mars.parent_checkpoint"] == str(tiny_model_dir)
    assert mv.tags["mlflow.source.git.commit"] == git_state()[0] != ""
    assert mv.tags["mars.git.dirty"] in ("true", "false")
    training = client.get_run(mv.run_id)
    assert training.data.tags["mlflow.source.git.commit"] == git_state()[0]
    assert training.data.tags["mars.base_model"] == "embedded"
    assert "config.yaml" in {a.path for a in client.list_artifacts(mv.run_id)}

    local = download_registered("models:/tiny-chat@candidate", store, tmp_path / "cache")
    assert (local / "config.json").is_file() and (local / "tokenizer.json").is_file()
    assert load_tokenizer(local).chat_template  # one folder our engines load
    assert download_registered(f"models:/tiny-chat/{version}", store, tmp_path / "cache") == local

    os.environ["MLFLOW_TRACKING_URI"] = store
    try:
        parts = mlflow.transformers.load_model("models:/tiny-chat@candidate",
                                               return_type="components")
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
    assert parts["tokenizer"].chat_template
