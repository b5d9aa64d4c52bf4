"""The run folder, in one place: its stages in the order they run, their folder and file names,
and the episode Parquet codec. Tasks, flows, the CLI, the replay viewer, benches and tests ask
this module; a stage renamed here needs no other edit.

    runs/<run>/                config.yaml, run_key.json, .lock, mlflow_run.json, registered.json
      init/                    prepare_policy/  evaluate/
      iter_0000/ ...           generate_rollouts/ build_players/ filter_steps/ assign_rewards/
                               bank_episodes/ build_batch/ compute_advantages/ replays/
                               train_step/ save_checkpoint/ evaluate/
      final/                   model/  strength/

Every stage folder is written whole or not at all (`mars_core.stages`), with its
`metrics.json`; a stage played in shards first fills `<stage>.shards/shard_XXXX/`.
"""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from mars_core.stages import is_done
from mars_core.types import episodes_frame, episodes_from_frames, turns_frame

# -- stages, by the folder they write ----------------------------------------------------------
PREPARE_POLICY = "prepare_policy"  # the start policy (the format warm-up where there is one)
EVALUATE = "evaluate"  # the game-strength evaluation (at the start and after a step)
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


def iter_dir(run_dir: Path, k: int) -> Path:
    return Path(run_dir) / iter_name(k)


def stage_dir(run_dir: Path, k: int | str, stage: str) -> Path:
    """A stage's folder: in `iter_k/` for an int k, else in the group `k` ("init", "final")."""
    base = iter_dir(run_dir, k) if isinstance(k, int) else Path(run_dir) / k
    return base / stage


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
