"""The run folder, in one place: its stages in the order they run, their folder and file names,
and the episode Parquet codec. Tasks, flows, the CLI, the replay viewer, benches and tests ask
this module; a stage renamed here needs no other edit.

    runs/<run>/                config.yaml, run_key.json, .lock, mlflow_run.json, registered.json
      init/                    prepare_policy/  evaluate/
      iter_0000/ ...           generate_rollouts/ build_players/ filter_steps/ assign_rewards/
                               bank_episodes/ build_batch/ compute_advantages/ replays/
                               train_step/ save_checkpoint/ evaluate/
      final/                   model/  strength/

Every stage folder is written whole or not at all (`mars_core.run.commit`), with its
`metrics.json`; a stage played in shards first fills `<stage>.shards/shard_XXXX/`.

The DAG's data edges are declared here too: which stage reads which stage's folder, in its own
group (`STAGE_INPUTS`) or an earlier one (`EARLIER_INPUTS`). Tasks read another stage's output
through `input_dir` alone, which refuses an undeclared read; `dag_mermaid` draws the picture
(docs/dag.md).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import polars as pl

from mars_core.run.commit import is_done
from mars_core.types import episodes_frame, episodes_from_frames, turns_frame

# -- stages, by the folder they write ----------------------------------------------------------
PREPARE_POLICY = "prepare_policy"  # the start policy (the format warm-up where there is one)
EVALUATE = "evaluate"  # the game evaluation (at the start and after a step)
GENERATE_ROLLOUTS = "generate_rollouts"
BUILD_PLAYERS = "build_players"
FILTER_STEPS = "filter_steps"
ASSIGN_REWARDS = "assign_rewards"
BANK_EPISODES = "bank_episodes"
BUILD_BATCH = "build_batch"
COMPUTE_ADVANTAGES = "compute_advantages"
REPLAYS = "replays"
TRAIN_STEP = "train_step"
SAVE_CHECKPOINT = "save_checkpoint"
FINAL_MODEL = "model"  # the final model (the MLflow model inside), registered
STRENGTH = "strength"  # start policy against the final one on the same deals

INIT, FINAL = "init", "final"  # the groups around the iterations
INIT_STAGES = (PREPARE_POLICY, EVALUATE)
ITERATION_STAGES = (GENERATE_ROLLOUTS, BUILD_PLAYERS, FILTER_STEPS, ASSIGN_REWARDS, BANK_EPISODES,
                    BUILD_BATCH, COMPUTE_ADVANTAGES, REPLAYS, TRAIN_STEP, SAVE_CHECKPOINT, EVALUATE)
FINAL_STAGES = (FINAL_MODEL, STRENGTH)
# (group, its stages) in the order a run writes them; "iter" stands for every iter_XXXX
STAGES = ((INIT, INIT_STAGES), ("iter", ITERATION_STAGES), (FINAL, FINAL_STAGES))
# where each stage's turns are, best first (rewards and gates > kept steps > raw games)
TURN_STAGES = (ASSIGN_REWARDS, FILTER_STEPS, GENERATE_ROLLOUTS)

# -- the DAG's data edges: the stage folders each stage reads (through `input_dir` alone) -------
# of its own group (the same iteration; init/ or final/ for theirs)
STAGE_INPUTS = {
    EVALUATE: (PREPARE_POLICY, SAVE_CHECKPOINT),  # the policy it plays: init's, or the iteration's
    BUILD_PLAYERS: (GENERATE_ROLLOUTS,),
    FILTER_STEPS: (GENERATE_ROLLOUTS, BUILD_PLAYERS),
    ASSIGN_REWARDS: (FILTER_STEPS, BUILD_PLAYERS),
    BANK_EPISODES: (ASSIGN_REWARDS,),
    BUILD_BATCH: (BANK_EPISODES,),  # the bank: this iteration's part and the window's earlier ones
    COMPUTE_ADVANTAGES: (BUILD_BATCH,),
    REPLAYS: (ASSIGN_REWARDS, COMPUTE_ADVANTAGES),
    TRAIN_STEP: (COMPUTE_ADVANTAGES,),
    SAVE_CHECKPOINT: (TRAIN_STEP,),
}
# of an earlier group: init/, an earlier iteration (k-1's checkpoint is iteration k's policy),
# or, for final/, the iterations
EARLIER_INPUTS = {
    GENERATE_ROLLOUTS: (PREPARE_POLICY, SAVE_CHECKPOINT),  # the policy, the frozen opponents
    BUILD_BATCH: (BUILD_BATCH,),  # the steps earlier batches drew (unless batching.reuse)
    COMPUTE_ADVANTAGES: (SAVE_CHECKPOINT,),  # a stateful estimator's state
    TRAIN_STEP: (PREPARE_POLICY, SAVE_CHECKPOINT),  # the policy and optimizer; the KL reference
    FINAL_MODEL: (PREPARE_POLICY, SAVE_CHECKPOINT),  # the base model's name; the last checkpoint
    STRENGTH: (EVALUATE,),  # the start policy's evaluation and the last iteration's
}

# -- run-level files ---------------------------------------------------------------------------
CONFIG_FILE = "config.yaml"
LOCK_FILE = ".lock"
# the config with its secrets, mode 0600, for shard workers in other processes (Ray); only
# while a run that has secrets is going (config.yaml has them masked)
PRIVATE_CONFIG_FILE = ".config.private.yaml"
RUN_KEY_FILE = "run_key.json"  # the run's random id, made with config.yaml (MLflow tag mars.key)
RUN_FILE = "mlflow_run.json"  # the run's MLflow run id
REGISTERED_FILE = "registered.json"  # the registered version, once registration is done
BANK_DIR = "bank"  # the episodes bank: bank/iter_XXXX.parquet, the trainable steps per iteration
# a stage whose readers find its output in a run-level folder (one part per iteration)
SHARED_OUTPUTS = {BANK_EPISODES: BANK_DIR}

# -- stage files -------------------------------------------------------------------------------
METRICS_FILE = "metrics.json"  # every stage: its metrics, logged at its step
EPISODES_FILE, TURNS_FILE = "episodes.parquet", "turns.parquet"  # the episode codec below
EPISODES_SAMPLE_FILE = "episodes_sample.parquet"  # the turns of a few episodes, for MLflow
TRANSCRIPTS_FILE = "transcripts.md"
SHARD_STATS_FILE = "shard.json"  # a rollout shard's counts
PLAN_FILE = "plan.json"  # how a sharded stage was split
PLAYERS_FILE = "players.parquet"
BANK_FILE = "bank.json"
BATCH_FILE = "batch.parquet"
COMPOSITION_FILE = "composition.json"
SAMPLES_FILE = "samples.parquet"  # compute_advantages: what the trainer reads
OPTIMIZER_STEPS_FILE = "optimizer_steps.json"  # train_step: each optimizer step's metrics
ADVANTAGES_FILE = "advantages.parquet"  # replays: (episode, turn) -> advantage
POLICY_FILE = "policy.json"  # prepare_policy: the start policy's path and base model
MODEL_DIR = "model"  # prepare_policy: the warmed-up weights
CHECKPOINT_FILE = "checkpoint.json"  # save_checkpoint: its iteration and source
RESULTS_FILE = "results.json"  # evaluate: one record per (game, opponent, seat)
STRENGTH_JSON, STRENGTH_MD = "strength.json", "strength.md"

ITER_GLOB = "iter_[0-9][0-9][0-9][0-9]"
_ITER = re.compile(r"^iter_(\d+)$")


def iter_name(k: int) -> str:
    return f"iter_{k:04d}"


def iteration_of(name: str) -> int | None:
    """k for a folder named `iter_k`, else None."""
    m = _ITER.match(name)
    return int(m.group(1)) if m else None


def bank_part(bank_dir: Path, k: int) -> Path:
    """Iteration k's part of the episodes bank (`BANK_DIR`): `iter_XXXX.parquet`."""
    return Path(bank_dir) / f"{iter_name(k)}.parquet"


BANK_PART_GLOB = "iter_*.parquet"  # every part of the bank


def iter_dir(run_dir: Path, k: int) -> Path:
    return Path(run_dir) / iter_name(k)


def stage_dir(run_dir: Path, k: int | str, stage: str) -> Path:
    """A stage's folder: in `iter_k/` for an int k, else in the group `k` ("init", "final")."""
    base = iter_dir(run_dir, k) if isinstance(k, int) else Path(run_dir) / k
    return base / stage


class UndeclaredInput(ValueError):
    """A stage reading a folder that STAGE_INPUTS / EARLIER_INPUTS do not give it: a bug."""


def input_dir(run_dir: Path, k: int | str, *, reader: str, stage: str,
              at: int | str | None = None) -> Path:
    """Where stage `reader`, running in group `k` (an iteration, INIT or FINAL), reads what stage
    `stage` wrote in group `at`: `k` itself unless given, else an earlier group (`k - 1`, INIT,
    the last iteration for final/). That is `stage`'s folder, or for a stage in SHARED_OUTPUTS
    the run-level folder it fills. Every read of another stage's output goes through here, so
    the DAG's data edges are the ones declared above: UndeclaredInput for any other."""
    at = k if at is None else at
    same = at == k
    declared = (STAGE_INPUTS if same else EARLIER_INPUTS).get(reader, ())
    here, there = _group_name(k), _group_name(at)
    if not same and _rank(at) >= _rank(k):
        raise UndeclaredInput(f"stage {reader} of {here} cannot read {stage} of {there}: "
                              "a stage reads its own group or an earlier one")
    if stage not in _stages_of(at):
        raise UndeclaredInput(f"stage {reader} of {here} reads {stage} of {there}: {there} has "
                              f"no stage {stage}")
    if stage not in declared:
        table = "STAGE_INPUTS" if same else "EARLIER_INPUTS"
        raise UndeclaredInput(
            f"stage {reader} of {here} reads {stage} of {there}, which mars_core/run/layout.py does "
            f"not declare as its input ({table}[{reader!r}] = {declared}): declare it there")
    if stage in SHARED_OUTPUTS:
        return Path(run_dir) / SHARED_OUTPUTS[stage]
    return stage_dir(run_dir, at, stage)


def _group_name(group: int | str) -> str:
    return iter_name(group) if isinstance(group, int) else str(group)


def _rank(group: int | str) -> float:
    """The order a run writes its groups: init, iter_0000, iter_0001, ..., final."""
    return -1 if group == INIT else math.inf if group == FINAL else int(group)


def _stages_of(group: int | str) -> tuple[str, ...]:
    return {INIT: INIT_STAGES, FINAL: FINAL_STAGES}.get(group, ITERATION_STAGES)


def dag_mermaid() -> str:
    """The run's DAG as Mermaid flowchart text, drawn from STAGE_INPUTS and EARLIER_INPUTS: each
    group's stages in the order they run, a solid arrow for a read in the same group, a dotted
    one for a read of an earlier group (init/, an earlier iteration, the iterations for final/)."""
    titles = {INIT: "init/", "iter": "iter_k/ (every iteration k)", FINAL: "final/"}
    lines = ["flowchart TD"]
    for g, stages in STAGES:
        lines.append(f'  subgraph g_{g}["{titles[g]}"]')
        lines += [f'    {g}_{s}["{s}"]' for s in stages]
        lines.append("  end")
    for i, (g, stages) in enumerate(STAGES):
        for reader in stages:
            lines += [f"  {g}_{s} --> {g}_{reader}" for s in STAGE_INPUTS.get(reader, ())
                      if s in stages]
            for s in EARLIER_INPUTS.get(reader, ()):
                for h, before in STAGES[:i + 1]:
                    if s in before and h != g:
                        lines.append(f"  {h}_{s} -.-> {g}_{reader}")
                    elif s in before and h == "iter":  # iteration k reads k-1 (and earlier)
                        lines.append(f'  {h}_{s} -. "earlier iterations" .-> {g}_{reader}')
    return "\n".join(lines) + "\n"


def shards_dir(stage: Path) -> Path:
    """Where a sharded stage's parts wait for the merge: `<stage>.shards/`."""
    return stage.with_name(stage.name + ".shards")


def shard_folder(stage: Path, i: int) -> Path:
    return shards_dir(stage) / f"shard_{i:04d}"


def checkpoint_dir(run_dir: Path, k: int) -> Path:
    """The published checkpoint of iteration k (weights, tokenizer, trainer state)."""
    return stage_dir(run_dir, k, SAVE_CHECKPOINT)


def start_model_dir(run_dir: Path) -> Path:
    """The warmed-up start weights (present only when the run had a format warm-up)."""
    return stage_dir(run_dir, INIT, PREPARE_POLICY) / MODEL_DIR


def final_model_dir(run_dir: Path) -> Path:
    return stage_dir(run_dir, FINAL, FINAL_MODEL)


def stage_groups(run_dir: Path) -> list[tuple[Path, tuple[str, ...]]]:
    """(folder, its stages) in the order the run wrote them: init, each iter_k, final."""
    run_dir = Path(run_dir)
    groups = [(run_dir / INIT, INIT_STAGES)]
    groups += [(d, ITERATION_STAGES) for d in sorted(run_dir.glob(ITER_GLOB))]
    return groups + [(run_dir / FINAL, FINAL_STAGES)]


def finished_stages(run_dir: Path) -> list[Path]:
    """The run's finished stage folders, in the order they ran."""
    return [base / s for base, names in stage_groups(run_dir) for s in names
            if is_done(base / s)]


# -- the episode codec: an episode folder is episodes.parquet + turns.parquet ------------------
def write_episodes(folder: Path, episodes) -> None:
    episodes_frame(episodes).write_parquet(Path(folder) / EPISODES_FILE)
    turns_frame(episodes).write_parquet(Path(folder) / TURNS_FILE)


def read_episodes(folder: Path) -> list:
    return episodes_from_frames(pl.read_parquet(Path(folder) / EPISODES_FILE),
                                pl.read_parquet(Path(folder) / TURNS_FILE))
