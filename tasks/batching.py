"""Tasks between post-processing and training (SPEC sections 3 and 5):

    bank_episodes -> build_batch -> compute_advantages

`bank_episodes` adds the iteration's eligible policy steps (gated steps and opponents' turns
stay out) to the episodes bank, `runs/<run>/bank/iter_<k>.parquet`. `build_batch` draws the
training batch from the bank's last `batching.window` iterations (round-robin by game, reward
bins, per-episode cap; steps of earlier batches excluded unless `batching.reuse`) and logs its
composition. `compute_advantages` runs the configured estimator's record on the batch
(`mars_core.advantages.estimators`); a stateful one (RAE) gets its state from the policy's checkpoint and
its updated state is written out, which `train_step` saves into the next checkpoint, so a
resumed run continues it exactly.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from mars_core.batching.bank import bank_add, bank_read, trainable_turns
from mars_core.batching.builder import (FORMER_ID, build_batch as draw, composition_metrics,
                                       with_turn_ids)
from mars_core.run.checkpoint import ESTIMATOR_STATE, load_estimator_state
from mars_core.advantages.mirror import MIRROR_MEMORY, with_mirror_targets
from mars_core.advantages.all_actions import (COUNTERFACTUAL, GREEDY_MEMORY, with_all_actions,
                                              with_best_valued, with_greedy_actions)
from mars_core.advantages.estimators import estimator
from mars_core.config.train import VALUE_LABELLED, AlgorithmConfig
from mars_core.run.layout import (ASSIGN_REWARDS, BANK_DIR, BANK_EPISODES, BANK_FILE, BATCH_FILE,
                                  BUILD_BATCH, COMPOSITION_FILE, COMPUTE_ADVANTAGES, SAMPLES_FILE,
                                  SAVE_CHECKPOINT, TURNS_FILE)
from mars_core.run.seeds import Stream
from mars_core.run.commit import write_json
from tasks.stage import StageContext, iteration_stage


def bank_dir(run_dir: str) -> Path:
    return Path(run_dir) / BANK_DIR


@iteration_stage(BANK_EPISODES)
def bank_episodes(ctx: StageContext, out: Path) -> dict:
    """Iteration k's trainable policy steps into the episodes bank (idempotent on resume): the
    eligible ones with completion tokens, carrying the rewards of those without (a context
    overflow's penalty lands on the seat's last trainable turn, `trainable_turns`)."""
    turns = pl.read_parquet(ctx.inputs[ASSIGN_REWARDS] / TURNS_FILE)
    steps, counts = trainable_turns(turns)
    steps = with_turn_ids(steps)
    path = bank_add(bank_dir(ctx.run_dir), ctx.k, steps)
    write_json(out / BANK_FILE, {"part": str(path), "steps": len(steps), **counts})
    return {"bank/steps_added": float(len(steps)),
            "bank/episodes_added": float(steps["episode_id"].n_unique()),
            "bank/tokenless_carried": float(counts["carried"]),
            "bank/tokenless_lost": float(counts["lost"])}


@iteration_stage(BUILD_BATCH)
def build_batch(ctx: StageContext, out: Path) -> dict:
    """Iteration k's training batch, drawn from the bank; its composition is logged."""
    b, k = ctx.cfg.batching, ctx.k
    first = max(0, k - b.window + 1)
    pool = bank_read(ctx.inputs[BANK_EPISODES], range(first, k + 1))
    used: set[str] = set()
    if not b.reuse:
        for j in range(first, k):
            drawn = ctx.earlier(BUILD_BATCH, at=j)
            ids = "turn_id" if "turn_id" in pl.read_parquet_schema(drawn / BATCH_FILE) \
                else FORMER_ID  # a batch drawn before the rename
            used |= set(pl.read_parquet(drawn / BATCH_FILE, columns=[ids])[ids])
    batch, comp = draw(pool, unit=b.unit, size=b.size, seed=ctx.seed(Stream.BATCHING),
                       max_turns_per_episode=b.max_turns_per_episode,
                       reward_bins=b.reward_bins, exclude=used)
    batch.write_parquet(out / BATCH_FILE)
    write_json(out / COMPOSITION_FILE, comp)
    return composition_metrics(comp)



# |advantage| at or below this is zero: a group mean subtracted from equal rewards can leave
# float dust (-1.1e-16 in a Tic-Tac-Toe batch), a turn that carries no signal all the same
ZERO_ADVANTAGE = 1e-9


def without_zero_advantage(samples: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """(`samples` without the turns whose advantage is zero, how many were dropped): DAPO's
    dynamic sampling, `algorithm.drop_zero_advantage`."""
    keep = samples.filter(pl.col("advantage").abs() > ZERO_ADVANTAGE)
    return keep, len(samples) - len(keep)


def advantage_samples(a: AlgorithmConfig, batch: pl.DataFrame,
                      state: dict) -> tuple[pl.DataFrame, dict, dict]:
    """(the samples the trainer reads, the estimator state to save with the next checkpoint,
    metrics) of `batch` under the algorithm section `a`, from `state` (the one saved with the
    policy's checkpoint; {} for a fresh model): the configured estimator's advantages, then
    `a.train_actions`' rows and `a.drop_zero_advantage`. Pure: the stage below and
    bench/variant_samples.py (which recomputes a run's batches under other estimators) share it."""
    est = estimator(a.estimator)
    with_adv, new = est.estimate(batch, est.options(a), state.get(est.name))
    if est.stateful:
        state = {**state, est.name: new}
    metrics: dict[str, float] = est.state_metrics(new)
    if a.train_actions == "all":
        with_adv = with_all_actions(with_adv)
    elif a.train_actions in VALUE_LABELLED:
        with_adv = with_best_valued(with_adv, keep_sampled=a.train_actions == "sampled_and_best",
                                    unit=a.label_advantage == "unit")
    elif a.train_actions == "greedy":
        with_adv, memory = with_greedy_actions(with_adv, state.get(GREEDY_MEMORY),
                                               a.action_memory, a.action_memory_states)
        if a.action_memory:
            state = {**state, GREEDY_MEMORY: memory}
            metrics["batch/remembered_states"] = float(len(memory))
    elif a.train_actions == "mirror":
        m = a.mirror
        with_adv, memory, more = with_mirror_targets(
            with_adv, state.get(MIRROR_MEMORY), alpha=m.alpha, eta=m.eta,
            magnet_rate=m.magnet_rate, window=m.window, max_states=m.max_states)
        state = {**state, MIRROR_MEMORY: memory}
        metrics |= more | {"batch/remembered_states": float(len(memory))}
    if a.train_actions != "sampled":
        metrics["batch/counterfactual_rows"] = float(with_adv[COUNTERFACTUAL].sum())
    if a.drop_zero_advantage:
        with_adv, dropped = without_zero_advantage(with_adv)
        metrics["batch/zero_advantage_dropped"] = float(dropped)
    samples = with_adv.select("turn_id", "episode_id", "game", "player", "role", "turn",
                              "reward", "advantage", "prompt_ids", "completion_ids",
                              "logprobs", "temperature",
                              *([COUNTERFACTUAL] if a.train_actions != "sampled" else []))
    return samples, state, metrics


@iteration_stage(COMPUTE_ADVANTAGES)
def compute_advantages(ctx: StageContext, out: Path) -> dict:
    """Advantages of the batch by the configured estimator; the samples the trainer reads."""
    batch = pl.read_parquet(ctx.inputs[BUILD_BATCH] / BATCH_FILE)
    state = (load_estimator_state(ctx.earlier(SAVE_CHECKPOINT, at=ctx.k - 1))
             if ctx.k > 0 else {})
    samples, state, metrics = advantage_samples(ctx.cfg.algorithm, batch, state)
    write_json(out / ESTIMATOR_STATE, state)
    samples.write_parquet(out / SAMPLES_FILE)
    adv = samples["advantage"]
    return metrics | {"batch/samples": float(len(samples)),
                      "batch/advantage_mean": float(adv.mean() or 0.0),
                      "batch/advantage_std": float(adv.std() or 0.0),
                      "batch/advantage_abs_max": float(adv.abs().max() or 0.0)}
