"""Which policy a stage plays or trains: the start policy, the policy of iteration k, the
frozen snapshots an iteration may meet; each read as a declared input of the reading stage
(`mars_core.run.layout.input_dir`)."""
from __future__ import annotations

from pathlib import Path

from mars_core.run.commit import read_json
from mars_core.run.layout import (GENERATE_ROLLOUTS, INIT, POLICY_FILE, PREPARE_POLICY,
                                  SAVE_CHECKPOINT, input_dir, iter_name)


def initial_policy(run_dir: Path, k: int | str, *, reader: str) -> str:
    """The policy RL starts from (the warmed-up model where there is a warm-up), as stage
    `reader` of group k reads it (a declared input: `mars_core.run.layout.input_dir`)."""
    init = input_dir(run_dir, k, reader=reader, stage=PREPARE_POLICY, at=INIT)
    return read_json(init / POLICY_FILE)["path"]


def policy_at(run_dir: Path, k: int, *, reader: str, lag: int = 0) -> str:
    """The policy that plays iteration k (and that its update starts from), as stage `reader`
    reads it: the start policy, or the checkpoint of k-1; `lag` updates older for games
    played while the update before runs (`rollout.overlap`: the checkpoint of k-2)."""
    if k - lag <= 0:
        return initial_policy(run_dir, k, reader=reader)
    return str(input_dir(run_dir, k, reader=reader, stage=SAVE_CHECKPOINT, at=k - 1 - lag))


def frozen_snapshots(run_dir: Path, k: int, lag: int = 0) -> dict[str, str]:
    """Frozen opponents available to iteration k: the start policy and every earlier
    checkpoint, before the one that plays (k-1, or k-1-lag), whose weights are still on disk
    (`checkpoint.keep_last` / `keep_every`). Label -> model folder."""
    snapshots = {"start": initial_policy(run_dir, k, reader=GENERATE_ROLLOUTS)}
    for j in range(k - 1 - lag):
        folder = input_dir(run_dir, k, reader=GENERATE_ROLLOUTS, stage=SAVE_CHECKPOINT, at=j)
        if any(folder.glob("*.safetensors")):
            snapshots[iter_name(j)] = str(folder)
    return snapshots
