"""A model folder with a manifest loads only as it was written; a corrupt checkpoint is a
one-line ModelError before anything loads it."""
from __future__ import annotations

import json

import pytest

from mars_core.models.manifest import MANIFEST, ManifestError, verify_folder, write_manifest
from mars_core.models.weights import ModelError, check_model_folder, load_model


def _folder(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "model" / "weights.bin").write_bytes(b"\0" * 1000)
    write_manifest(tmp_path)
    return tmp_path / "model"


def test_manifest_covers_the_folder_and_its_model_subfolder(tmp_path):
    model = _folder(tmp_path)
    assert (tmp_path / MANIFEST).is_file() and verify_folder(model) and verify_folder(tmp_path)
    assert not verify_folder(model / "sub")  # neither it nor its parent has one: no check


@pytest.mark.parametrize("change,needle", [
    (lambda m: (m / "weights.bin").write_bytes(b"\1" * 1000), "weights.bin does not match"),
    (lambda m: (m / "weights.bin").unlink(), "weights.bin is missing"),
    (lambda m: (m / "evil.py").write_text("import os"), "evil.py is not in its folder's manifest"),
])
def test_changed_folder_is_refused_by_the_loader(tmp_path, change, needle):
    model = _folder(tmp_path)
    change(model)
    with pytest.raises(ManifestError, match=needle):
        load_model(model)
    with pytest.raises(ModelError, match=needle):
        check_model_folder(model)


def test_truncated_checkpoint_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(ModelError, match="truncated") as e:
        check_model_folder(tmp_path)
    assert "\n" not in str(e.value)
    (tmp_path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelError, match="not a readable safetensors file"):
        check_model_folder(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="config.json is not readable JSON"):
        check_model_folder(tmp_path)


def test_size_only_and_unlisted_names(tmp_path):
    """A checkpoint's optimizer state is listed by size only; a stage's own files, written after
    the manifest (and their atomic-write temporaries), are not covered, at the top level only."""
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "optim.pt").write_bytes(b"\0" * 100)
    write_manifest(tmp_path, size_only=("state",), unlisted=("_DONE",))
    (tmp_path / "_DONE").write_text("{}")
    (tmp_path / "._DONE.123.tmp").write_text("{")
    (tmp_path / "state" / "optim.pt").write_bytes(b"\1" * 100)  # same size: not hashed
    assert verify_folder(tmp_path)
    (tmp_path / "state" / "optim.pt").write_bytes(b"\1" * 99)
    with pytest.raises(ManifestError, match=r"optim\.pt does not match its manifest \(99 bytes"):
        verify_folder(tmp_path)
    (tmp_path / "state" / "optim.pt").write_bytes(b"\1" * 100)
    (tmp_path / "state" / "_DONE").write_text("{}")
    with pytest.raises(ManifestError, match=r"state/_DONE is not in its folder's manifest"):
        verify_folder(tmp_path)
