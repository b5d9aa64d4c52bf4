"""A checkpoint written by training carries a manifest, committed with it: every later load of it
(`--policy`, the frozen pool, the next iteration) is hash-checked, and a changed weight file is
one line naming it. Checkpoints written before manifests load as before."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli.main import main
from mars_core.run.checkpoint import TRAINER_STATE, save_trainer_state
from mars_core.config import load_config
from mars_core.run.layout import METRICS_FILE, TRAIN_STEP, checkpoint_dir, stage_dir
from mars_core.models.manifest import MANIFEST, ManifestError, verify_folder
from mars_core.models.weights import ModelError, check_model_folder, load_model
from mars_core.run.commit import MARKER, manifest, stage_output, verify_stage, write_json
from tasks.paths import prepare_run_dir
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def written(tmp_path_factory, tiny_model_dir) -> Path:
    """Iteration 0's checkpoint of a run, written by the real `save_checkpoint` task from a
    finished train step (the tiny model's files and a trainer state)."""
    from tasks.train import save_checkpoint

    run = tmp_path_factory.mktemp("runs") / "ckpt"
    prepare_run_dir(run, load_config(REPO / "configs/smoke.yaml",
                                     [f"model.path={tiny_model_dir}"]))
    with stage_output(stage_dir(run, 0, TRAIN_STEP)) as out:
        for f in tiny_model_dir.iterdir():
            shutil.copy(f, out / f.name)
        save_trainer_state(out, None, None, 0)
        write_json(out / METRICS_FILE, {})
    save_checkpoint.fn(str(run), 0)
    return checkpoint_dir(run, 0)


@pytest.fixture
def checkpoint(written, tmp_path) -> Path:
    """A copy of it that a test may damage."""
    return Path(shutil.copytree(written, tmp_path / "iter_0000"))


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte of the tensor data changed
    path.write_bytes(bytes(data))


def test_checkpoint_is_committed_with_its_manifest_and_loads(checkpoint):
    assert MANIFEST in manifest(checkpoint)  # written before the commit: in the stage's marker
    listed = json.loads((checkpoint / MANIFEST).read_text())["files"]
    assert "sha256" in listed["model.safetensors"] and "config.json" in listed
    assert "sha256" not in listed[TRAINER_STATE]  # by size: no model load reads it
    assert (checkpoint / MARKER).is_file() and (checkpoint / METRICS_FILE).is_file()
    assert verify_folder(checkpoint)  # the stage's own files, added after it, do not count
    check_model_folder(checkpoint)
    load_model(checkpoint)


def test_changed_weight_file_is_one_line_naming_it(checkpoint, tmp_path, capsys, monkeypatch):
    weights = checkpoint / "model.safetensors"
    _flip_a_byte(weights)
    with pytest.raises(ManifestError, match=r"model\.safetensors does not match its manifest"):
        load_model(checkpoint)  # the frozen pool, the next iteration
    with pytest.raises(ModelError) as e:
        check_model_folder(checkpoint)  # what `--policy` and `--agents` check before starting
    assert str(weights) in str(e.value) and "\n" not in str(e.value)
    monkeypatch.chdir(tmp_path)
    rc = main(["eval", "strategic", "--games", "tic_tac_toe", "--opponents", "bot:random",
               "--n", "1", "--policy", str(checkpoint), "--runs-dir", str(tmp_path / "runs"),
               "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{weights} does not match its manifest" in err
    assert not (tmp_path / "r.json").exists()


def test_changed_training_state_is_found_by_size_or_by_the_resume_check(checkpoint):
    state = checkpoint / TRAINER_STATE
    _flip_a_byte(state)  # no model load reads it: its hash is the stage marker's to check
    assert verify_folder(checkpoint)
    assert verify_stage(checkpoint) == (f"{state} does not match the SHA-256 recorded when it "
                                        "was written")
    state.write_bytes(state.read_bytes()[:-1])
    with pytest.raises(ManifestError, match=r"trainer_state\.pt does not match its manifest"):
        load_model(checkpoint)


def test_checkpoint_without_a_manifest_loads_as_before(checkpoint):
    (checkpoint / MANIFEST).unlink()  # written before manifests existed
    _flip_a_byte(checkpoint / "model.safetensors")
    assert not verify_folder(checkpoint)
    check_model_folder(checkpoint)
    load_model(checkpoint)
