"""Issue 49, the footprint: a run's weights are on disk once per distinct model. The final model
and the registered version (MLflow's local artifact store) are hard links to the last
checkpoint's files where the filesystem allows, a copy where it refuses links; nothing writes
through those links (every manifest still holds) and the model loads from the registry
unchanged."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient
from mlflow.utils.file_utils import local_file_uri_to_path
from safetensors.torch import load_file

from cli.main import main
from mars_core.models.manifest import sha256, verify_folder
from mars_core.run.commit import read_json
from mars_core.run.layout import (REGISTERED_FILE, checkpoint_dir, final_model_dir,
                                  start_model_dir)
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(600)

SMOKE = str(REPO / "configs/smoke.yaml")


def _links_work(folder: Path) -> bool:
    a, b = folder / ".link-probe", folder / ".link-probe-2"
    a.write_text("x")
    try:
        os.link(a, b)
        return True
    except OSError:
        return False
    finally:
        for f in (a, b):
            f.unlink(missing_ok=True)


def train_args(runs: Path, model: Path) -> list[str]:
    """`mars train` of a tiny two-iteration run (the smoke preset, a format warm-up step, no
    evaluation) that registers its final model."""
    sets = [f"model.path={model}", "model.max_context_tokens=1024",
            "rollout.max_new_tokens=8", "warmup.steps=1", "warmup.probe_games=1",
            "evaluation.every=0", "tracking.registered_model=tiny-footprint"]
    return ["train", "--config", SMOKE, "--runs-dir", str(runs), "--run-name", "fp",
            *[a for s in sets for a in ("--set", s)]]


@pytest.fixture(scope="module")
def run(tmp_path_factory, prefect_api, tiny_model_dir) -> Path:
    """The tiny run of `train_args`, finished."""
    runs = tmp_path_factory.mktemp("runs")
    assert main(train_args(runs, tiny_model_dir)) == 0
    return runs / "fp"


def _registered_dir(run: Path) -> tuple[Path, dict]:
    """The registered version's Hugging Face folder in the local artifact store, and
    registered.json."""
    done = read_json(run / REGISTERED_FILE)
    client = MlflowClient(tracking_uri=f"sqlite:///{run.parent}/mlflow.db")
    mv = client.get_model_version(done["name"], str(done["version"]))
    return Path(local_file_uri_to_path(mv.source)) / "model", done


def test_registered_weights_are_the_checkpoints_files_and_load_unchanged(run, tmp_path):
    from mars_core.models.weights import load_model
    from tasks.model_registry import download_registered

    stored, done = _registered_dir(run)
    last, final = checkpoint_dir(run, 1), final_model_dir(run)
    assert stored.is_dir() and stored.resolve().is_relative_to(run.parent.resolve())
    for name in ("model.safetensors", "config.json"):
        ino = (last / name).stat().st_ino
        if _links_work(run.parent):
            assert (stored / name).stat().st_ino == ino, name  # a link, not a copy
            assert (final / name).stat().st_ino == ino, name
        assert sha256(stored / name) == sha256(last / name)
    # nothing wrote through the links: the checkpoint and the final model match their manifests
    assert verify_folder(last) and verify_folder(final)
    # the registry's model, downloaded and loaded, is the checkpoint's
    local = download_registered(f"models:/{done['name']}@candidate",
                                f"sqlite:///{run.parent}/mlflow.db", tmp_path / "cache")
    assert sha256(local / "model.safetensors") == sha256(last / "model.safetensors")
    want = load_file(last / "model.safetensors")
    got = load_model(local).state_dict()
    assert all(torch.equal(got[k], v) for k, v in want.items() if k in got)
    assert verify_folder(last)  # the download copied out, it did not write in


def test_weights_are_on_disk_once_per_distinct_model(run):
    """The start policy (warmed up) and the two checkpoints (`keep_last` 2): three weight files
    under the runs folder however many names they have (final model, MLflow model, registry)."""
    if not _links_work(run.parent):
        pytest.skip("this filesystem makes no hard links: the registry holds a copy")
    weights = list(run.parent.rglob("*.safetensors"))
    inodes = {f.stat().st_ino for f in weights}
    expected = {(d / "model.safetensors").stat().st_ino
                for d in (start_model_dir(run), checkpoint_dir(run, 0), checkpoint_dir(run, 1))}
    assert inodes == expected and len(expected) == 3, sorted(map(str, weights))
    assert len(weights) > len(inodes)  # the final model and the registry are the same bytes
    # the tokenizer, saved again with every checkpoint and by MLflow, is one file
    tokenizers = list(run.parent.rglob("tokenizer.json"))
    assert len(tokenizers) > 3 and len({f.stat().st_ino for f in tokenizers}) == 1, tokenizers


def test_where_links_fail_the_registry_gets_a_copy(tmp_path, tiny_model_dir, monkeypatch):
    """Another filesystem (EXDEV): the registered files are copies, the same bytes, and the
    version loads."""
    import mlflow.transformers

    from tasks.model_registry import register_model
    from tests.flows.test_registry import _final_model

    run, model = _final_model(tmp_path, tiny_model_dir)
    real_link = os.link

    def cross_device(src, dst, *a, **k):
        if "mlartifacts" in str(dst):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_link(src, dst, *a, **k)

    monkeypatch.setattr(os, "link", cross_device)
    register_model(run, model / "mlflow", "tiny-chat", "candidate", {})
    stored, _ = _registered_dir(run)
    weights = stored / "model.safetensors"
    assert weights.stat().st_ino != (model / "model.safetensors").stat().st_ino
    assert weights.stat().st_nlink == 1
    assert sha256(weights) == sha256(model / "model.safetensors")
    parts = mlflow.transformers.load_model(str(stored.parent), return_type="components")
    assert parts["model"].num_parameters() > 0


def test_a_rerun_of_the_finished_run_prints_its_summary_and_nothing_else(run, tiny_model_dir):
    """The same command again, as a user runs it (`mars`, Prefect's temporary server): every
    step skipped, exit 0, its last line the summary, no ERROR or traceback from the server's
    shutdown (tests/flows/test_quiet_rerun.py), and not one more weight file on disk."""
    import subprocess
    import sys

    from tests.flows.test_quiet_rerun import fresh_prefect_env, noise

    before = sorted(str(p) for p in run.parent.rglob("*.safetensors"))
    done = subprocess.run([sys.executable, "-m", "cli.main", *train_args(run.parent, tiny_model_dir)],
                          env=fresh_prefect_env(run.parent / "prefect-home"), cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=500)
    assert done.returncode == 0, done.stdout[-3000:]
    assert not noise(done.stdout), done.stdout[-3000:]
    assert done.stdout.rstrip().splitlines()[-1].startswith(f"mars: done: {run}"), done.stdout
    assert sorted(str(p) for p in run.parent.rglob("*.safetensors")) == before
