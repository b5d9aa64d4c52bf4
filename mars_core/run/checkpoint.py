"""Checkpoints: a loadable model folder (safetensors + tokenizer) plus the trainer state.

`trainer_state.pt` holds the optimizer and scheduler state dicts, the RNG states and the
iteration counter; it loads with `weights_only=True` (tensors and plain Python values only, no
pickled objects). With the DeepSpeed backend the optimizer, scheduler and fp32 master weights
live in the `deepspeed/` folder (DeepSpeed's own checkpoint, one fixed tag) and
`trainer_state.pt` keeps only the iteration and RNG states.

A checkpoint (and every other model folder a run writes) carries a manifest
(`mars_core.models.manifest`), written before its stage commits, so every later load of it (`--policy`,
the frozen opponents, the next iteration, a resume, the registry upload) is hash-checked.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import torch

from mars_core.run.layout import METRICS_FILE
from mars_core.models.manifest import write_manifest
from mars_core.models.weights import hf_bars_off
from mars_core.run.commit import MARKER, PUBLISHED

TRAINER_STATE = "trainer_state.pt"
DEEPSPEED_STATE = "deepspeed"  # folder: DeepSpeed's checkpoint (heavy, like TRAINER_STATE)
DEEPSPEED_TAG = "state"  # the one tag saved and loaded
ADAPTER_DIR = "adapter"  # folder: a LoRA checkpoint's adapter (mars_core.training.lora.ADAPTER)


def link_or_copy(src: Path, dst: Path) -> bool:
    """`dst` as a hard link to `src` (one copy of the bytes on disk), or a copy where the
    filesystem refuses a link (another filesystem, no hard links, too many links); an existing
    `dst` is replaced (unlinked first: never written through, which would change `src` too).
    True when linked. Only for files nothing writes into after (checkpoint weights, an MLflow
    model): every writer here writes a new file and renames or links it into place."""
    src, dst = Path(src), Path(dst)
    if dst.exists() or dst.is_symlink():
        if dst.is_file() and os.path.samefile(src, dst):
            return True
        dst.unlink()
    try:
        os.link(src, dst)
        return True
    except OSError:
        shutil.copyfile(src, dst)
        return False


def link_tree(src: Path, dst: Path) -> int:
    """Every file under `src` at the same place under `dst` (`link_or_copy`, folders made as
    needed); returns the bytes that had to be copied (0 when every file was linked)."""
    src, dst = Path(src), Path(dst)
    copied = 0
    for f in sorted(src.rglob("*")):
        if f.is_file():
            target = dst / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not link_or_copy(f, target):
                copied += f.stat().st_size
    return copied


def share_identical(folder: Path, reference: Path, skip=lambda name: False) -> int:
    """Each file directly in `folder` that is byte for byte the same-named file of `reference`
    becomes a hard link to it (`link_or_copy`): a checkpoint's tokenizer files are its
    predecessor's, written again by every save. `skip(name)`: files not compared (weights).
    Returns the bytes no longer stored twice."""
    import filecmp

    folder, reference, saved = Path(folder), Path(reference), 0
    for f in sorted(folder.iterdir()) if folder.is_dir() else ():
        ref = reference / f.name
        if (not skip(f.name) and f.is_file() and not f.is_symlink() and ref.is_file()
                and not os.path.samefile(f, ref) and f.stat().st_size == ref.stat().st_size
                and filecmp.cmp(f, ref, shallow=False) and link_or_copy(ref, f)):
            saved += ref.stat().st_size
    return saved


def save_model(folder: Path, model, tokenizer) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with hf_bars_off():
        model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def write_checkpoint_manifest(folder: Path) -> None:
    """The manifest of a model folder a stage writes (a checkpoint, the warmed-up start
    policy, the final model), inside the stage's scratch folder before it commits: every file's
    SHA-256, the optimizer and DeepSpeed state by size only (no model load reads them; a resume
    checks their hashes against the stage's marker), the stage's own files written after it
    (marker, metrics, publish ledger) not covered."""
    write_manifest(folder, size_only=(TRAINER_STATE, DEEPSPEED_STATE),
                   unlisted=(MARKER, PUBLISHED, METRICS_FILE))


def save_trainer_state(folder: Path, optimizer, scheduler, iteration: int) -> None:
    """Optimizer and scheduler (None for both with the DeepSpeed backend, whose own checkpoint
    holds them), RNG states and the iteration."""
    state = {
        **({"optimizer": optimizer.state_dict()} if optimizer is not None else {}),
        **({"scheduler": scheduler.state_dict()} if scheduler is not None else {}),
        "iteration": iteration,
        "rng_torch": torch.get_rng_state(),
        "rng_python": list(random.getstate()[1]),
        "rng_python_version": random.getstate()[0],
        "rng_python_gauss": random.getstate()[2],
    }
    torch.save(state, Path(folder) / TRAINER_STATE)


def load_trainer_state(folder: Path, optimizer, scheduler) -> int:
    """Restore optimizer, scheduler and RNG states; return the iteration they belong to.
    A folder without trainer state (a fresh model) leaves everything as it is: -1. A state
    saved without optimizer/scheduler (the DeepSpeed backend) leaves those as they are."""
    path = Path(folder) / TRAINER_STATE
    if not path.is_file():
        return -1
    state = torch.load(path, weights_only=True)
    if "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    if "scheduler" in state:
        scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng_torch"])
    random.setstate((state["rng_python_version"], tuple(state["rng_python"]),
                     state["rng_python_gauss"]))
    return int(state["iteration"])


ESTIMATOR_STATE = "estimator_state.json"


def save_estimator_state(folder: Path, state: dict) -> None:
    """A stateful estimator's state (RAE baselines: name -> {group key: value}) as JSON beside
    the weights, so the checkpoint that continues a run continues the estimator too."""
    (Path(folder) / ESTIMATOR_STATE).write_text(json.dumps(state, indent=2, sort_keys=True))


def load_estimator_state(folder: Path) -> dict:
    """The state saved with a checkpoint; {} for a fresh model (no state yet)."""
    path = Path(folder) / ESTIMATOR_STATE
    return json.loads(path.read_text()) if path.is_file() else {}


# ---------------------------------------------------------------------------------------------
# Pruning: old checkpoints keep their small files (config, tokenizer, estimator state, the
# completion marker) and lose their weights and optimizer state.


def is_heavy(name: str) -> bool:
    """Weights and optimizer state (DeepSpeed's `deepspeed/` folder and a LoRA adapter
    included: only the newest checkpoints' are read, by the next update or a redo of it): what
    pruning removes from old checkpoints. `name`: a file name or a path relative to the
    checkpoint."""
    first = Path(name).parts[0]
    return first.endswith(".safetensors") or first in (TRAINER_STATE, DEEPSPEED_STATE,
                                                       ADAPTER_DIR)


def prune_plan(k: int, keep_last: int, keep_every: int | None) -> list[int]:
    """The iterations whose checkpoints lose their weights once iteration k's is published:
    all but the last `keep_last` (k's included) and, with `keep_every`, every one whose
    iteration number plus one is a multiple of it (a 0 or None `keep_every` keeps none)."""
    return [j for j in range(0, k - keep_last + 1)
            if not (keep_every and (j + 1) % keep_every == 0)]


def drop_heavy(folder: Path) -> None:
    """Remove the heavy files and folders (`is_heavy`) of `folder`; a missing folder is
    left alone."""
    folder = Path(folder)
    if folder.is_dir():
        for f in folder.iterdir():
            if is_heavy(f.name):
                if f.is_dir():
                    shutil.rmtree(f)
                else:
                    f.unlink()
