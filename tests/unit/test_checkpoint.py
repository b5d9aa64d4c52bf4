"""Checkpoint pruning: which iterations lose their weights, and what of a folder goes."""
from __future__ import annotations

import pytest

from mars_core.run.checkpoint import DEEPSPEED_STATE, ESTIMATOR_STATE, TRAINER_STATE, drop_heavy, \
    is_heavy, prune_plan


@pytest.mark.parametrize(("k", "keep_last", "keep_every", "expected"), [
    (0, 1, 0, []),  # the newest keep_last (k's own included) keep their weights
    (1, 1, 0, [0]),
    (1, 2, 0, []),
    (5, 2, 0, [0, 1, 2, 3]),
    (5, 3, 0, [0, 1, 2]),
    (7, 2, 3, [0, 1, 3, 4]),  # iterations 2 and 5 (3rd and 6th) stay for frozen opponents
    (7, 2, None, [0, 1, 2, 3, 4, 5]),
    (2, 10, 0, []),
])
def test_prune_plan(k, keep_last, keep_every, expected):
    assert prune_plan(k, keep_last, keep_every) == expected


def test_every_iteration_is_pruned_once_in_a_run():
    """Called after each iteration, the plans leave exactly the last `keep_last` and the
    `keep_every` ones with weights."""
    pruned: set[int] = set()
    for k in range(10):
        pruned |= set(prune_plan(k, 2, 4))
    assert sorted(set(range(10)) - pruned) == [3, 7, 8, 9]


def test_drop_heavy_removes_weights_and_optimizer_state_only(tmp_path):
    names = ["model.safetensors", "model-00001-of-00002.safetensors", TRAINER_STATE,
             "config.json", "tokenizer.json", ESTIMATOR_STATE, "checkpoint.json"]
    for name in names:
        (tmp_path / name).write_text("x")
    (tmp_path / DEEPSPEED_STATE / "state").mkdir(parents=True)
    (tmp_path / DEEPSPEED_STATE / "state" / "optim.pt").write_text("x")
    drop_heavy(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["config.json", "tokenizer.json", ESTIMATOR_STATE, "checkpoint.json"])
    drop_heavy(tmp_path / "missing")  # nothing to do


def test_is_heavy():
    assert is_heavy("model.safetensors") and is_heavy(TRAINER_STATE)
    assert is_heavy(f"{DEEPSPEED_STATE}/state/mp_rank_00_model_states.pt")
    assert is_heavy("adapter/adapter_model.safetensors") and is_heavy("adapter")
    assert not is_heavy("config.json") and not is_heavy(ESTIMATOR_STATE)


def test_the_pruned_adapter_folder_is_loras():
    from mars_core.run.checkpoint import ADAPTER_DIR
    from mars_core.training import lora

    assert ADAPTER_DIR == lora.ADAPTER


def test_share_identical_links_equal_files_only(tmp_path):
    from mars_core.run.checkpoint import share_identical

    ref, new = tmp_path / "ref", tmp_path / "new"
    ref.mkdir()
    new.mkdir()
    for folder, text in ((ref, "same"), (new, "same")):
        (folder / "tokenizer.json").write_text(text)
        (folder / "model.safetensors").write_text(text)
    (ref / "config.json").write_text("a")
    (new / "config.json").write_text("b")  # same size, other bytes
    (new / "only_here.json").write_text("x")
    saved = share_identical(new, ref, skip=is_heavy)
    assert saved == 4
    ino = lambda p: p.stat().st_ino  # noqa: E731
    assert ino(new / "tokenizer.json") == ino(ref / "tokenizer.json")
    assert ino(new / "model.safetensors") != ino(ref / "model.safetensors")  # skipped
    assert ino(new / "config.json") != ino(ref / "config.json")
    assert (new / "config.json").read_text() == "b" and (new / "only_here.json").is_file()
    assert share_identical(new, ref) == 4  # the weights now; the tokenizer is already one file
