"""Task: the iteration's games of the current policy (self-play, or against the opponents the
samplers draw), stored as Parquet (one row per turn)."""
from __future__ import annotations

import random
import threading
import time
from dataclasses import replace
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.rollout.play import EpisodeSpec, RolloutStats, play_episodes
from mars_core.rollout.reports import rollout_metrics, transcript
from mars_core.rollout.samplers import is_frozen, plan_episodes
from mars_core.run.layout import (EPISODES_FILE, EPISODES_SAMPLE_FILE, GENERATE_ROLLOUTS,
                                  TRANSCRIPTS_FILE, TURNS_FILE, stage_dir, write_episodes)
from mars_core.run.seeds import Stream
from mars_core.types import Episode, turns_frame
from mars_core.vocab import FROZEN, POLICY, Outcome
from tasks.engine_factory import make_engine, prompt_builder, sampling
from tasks.game_shards import play_shard, sharded_episodes
from tasks.paths import read_config
from tasks.policies import frozen_snapshots, policy_at
from tasks.shards import drop_shards, shard_slices
from tasks.stage import StageContext, iteration_stage
from tasks.stage_runner import derive_seed


# set by the training flow when it fails while an iteration's games are played ahead in a
# thread (`rollout.overlap`): that play ends at its next round of engine calls
STOP_PLAY = threading.Event()


def plan_iteration(cfg, run_dir: str, k: int, seed: int) -> list[EpisodeSpec]:
    """Iteration k's episodes from the samplers (environment, opponent, position), with the
    `frozen` opponent placeholder replaced by one earlier checkpoint, drawn per iteration."""
    r = cfg.rollout
    pools = {g: r.opponent_pool(g, k) for g in r.games}
    specs = plan_episodes(r.games, r.episodes_per_iteration, k, seed, pools=pools,
                          weights=r.game_weights, position=r.position)
    if any(a == FROZEN for s in specs for a in s.agents):
        label = random.Random(seed).choice(sorted(frozen_snapshots(run_dir, k, r.policy_lag)))
        specs = [replace(s, agents=tuple(f"{FROZEN}:{label}" if a == FROZEN else a
                                         for a in s.agents)) for s in specs]
    return specs


def _engines(cfg, run_dir: str, k: int, specs: list[EpisodeSpec]):
    """The policy's engine, plus one per frozen checkpoint the plan names (always in
    process: a vLLM server holds the policy's weights only)."""
    lag = cfg.rollout.policy_lag
    policy = make_engine(cfg, policy_at(run_dir, k, reader=GENERATE_ROLLOUTS, lag=lag),
                         log_dir=Path(run_dir), int8=cfg.rollout.int8)
    frozen = sorted({a for s in specs for a in s.agents if is_frozen(a)})
    if not frozen:
        return policy, policy
    snapshots = frozen_snapshots(run_dir, k, lag)
    engines = {POLICY: policy}
    engines |= {a: make_engine(cfg, snapshots[a.split(":", 1)[1]], backend="hf") for a in frozen}
    return engines, policy


def opponent_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Per game and opponent (self-play left out): episodes played and the policy's win rate,
    the numbers a curriculum is tuned by. Frozen checkpoints count as one opponent."""
    groups: dict[tuple[str, str], list[str]] = {}
    for ep in episodes:
        others = {a for a in ep.agents if a != POLICY}
        if not others or POLICY not in ep.agents:
            continue
        opponent = FROZEN if any(is_frozen(a) for a in others) else sorted(others)[0]
        seat = ep.agents.index(POLICY)
        groups.setdefault((ep.game, opponent), []).append(ep.outcomes[seat])
    metrics = {}
    for (game, opponent), outcomes in sorted(groups.items()):
        metrics[f"opponents/{game}/{opponent}/episodes"] = float(len(outcomes))
        metrics[f"opponents/{game}/{opponent}/win_rate"] = outcomes.count(Outcome.WIN) / len(outcomes)
    return metrics


def write_samples(out: Path, episodes: list[Episode], n_sample: int, n_transcripts: int,
                  seed: int) -> None:
    """A sample of episodes as Parquet and a few readable transcripts, for MLflow."""
    rng = random.Random(seed)
    picked = rng.sample(episodes, min(n_sample, len(episodes)))
    turns_frame(picked).write_parquet(out / EPISODES_SAMPLE_FILE)
    (out / TRANSCRIPTS_FILE).write_text("\n\n".join(transcript(e) for e in picked[:n_transcripts]))


def _play(cfg, run_dir: str, k: int, specs: list[EpisodeSpec], seed: int, progress: bool = True):
    """Play `specs` with the iteration's engines: (episodes, stats, the policy's engine,
    seconds spent loading the engines)."""
    start = time.perf_counter()
    engines, engine = _engines(cfg, run_dir, k, specs)
    load_s, stats = time.perf_counter() - start, RolloutStats()
    episodes = play_episodes(specs, engines, prompt_builder(cfg, engine.tokenizer),
                             sampling(cfg, seed), stats=stats, progress=progress,
                             per_game=cfg.rollout.per_game_sampling(seed), stop=STOP_PLAY.is_set,
                             mc_rollouts=cfg.rollout.mc_rollouts)
    return episodes, stats, engine, load_s


@task(task_run_name="rollout_shard iter_{k:04d} {shard}/{shards}", cache_policy=NO_CACHE)
def rollout_shard(run_dir: str, k: int, shard: int, shards: int) -> dict:
    """Slice `shard` of `shards` of iteration k's episode plan, played with its own engine
    (on whichever machine runs it) into `generate_rollouts.shards/shard_XXXX/`."""
    cfg = read_config(Path(run_dir))

    def play():
        seed = derive_seed(cfg, Stream.ROLLOUTS, k)
        specs = plan_iteration(cfg, run_dir, k, seed)
        mine = [specs[i] for i in shard_slices(len(specs), shards)[shard]]
        episodes, stats, _, load_s = _play(cfg, run_dir, k, mine, seed, progress=False)
        return episodes, stats, load_s

    return play_shard(stage_dir(run_dir, k, GENERATE_ROLLOUTS), shard, play)


def _sharded(cfg, run_dir: str, k: int, n_specs: int) -> tuple[list[Episode], RolloutStats, dict]:
    """Iteration k's plan played in rollout_shard tasks, merged in plan order."""
    return sharded_episodes(stage_dir(run_dir, k, GENERATE_ROLLOUTS), n_specs, cfg.cluster, rollout_shard,
                            {"run_dir": run_dir, "k": k}, "rollout")


def _drop_merged_shards(ctx: StageContext) -> None:
    drop_shards(ctx.folder)  # merged into the stage folder


@iteration_stage(GENERATE_ROLLOUTS, artifacts=(EPISODES_SAMPLE_FILE, TRANSCRIPTS_FILE),
                 artifact_path="{iter}", datasets=(EPISODES_FILE, TURNS_FILE),
                 after=_drop_merged_shards)
def generate_rollouts(ctx: StageContext, out: Path) -> dict:
    """Iteration k's games, in process or in rollout_shard tasks (`cluster.shards`)."""
    cfg, run_dir, k = ctx.cfg, ctx.run_dir, ctx.k
    seed = ctx.seed(Stream.ROLLOUTS)
    specs = plan_iteration(cfg, run_dir, k, seed)
    metrics, engine = {}, None
    if cfg.cluster.sharded:
        episodes, stats, metrics = _sharded(cfg, run_dir, k, len(specs))
    else:
        episodes, stats, engine, _ = _play(cfg, run_dir, k, specs, seed)
    write_episodes(out, episodes)
    write_samples(out, episodes, cfg.tracking.sample_episodes, cfg.tracking.transcripts, seed)
    metrics |= {f"rollout/{key}": v for key, v in rollout_metrics(episodes).items()}
    if len(cfg.rollout.games) > 1:  # the generalist: each game's curves too
        for game in cfg.rollout.games:
            mine = [ep for ep in episodes if ep.game == game]
            metrics |= {f"rollout/{game}/{key}": v for key, v in rollout_metrics(mine).items()}
    metrics |= opponent_metrics(episodes)
    metrics["rollout/tokens_per_s"] = stats.tokens_per_s
    metrics["rollout/generated_tokens"] = float(stats.generated_tokens)
    if getattr(engine, "autocast_bf16", None) is not None:  # in process: which precision played
        metrics["rollout/bf16"] = float(engine.autocast_bf16)
        metrics["rollout/int8"] = float(cfg.rollout.int8)
    if engine is not None and "reloads" in engine.stats:  # vLLM: requests in flight, reloads
        metrics["rollout/max_in_flight"] = float(engine.stats["max_in_flight"])
        metrics["rollout/weight_reloads"] = float(engine.stats["reloads"])
        metrics["rollout/weight_reload_s"] = engine.stats["reload_seconds"]
    if engine is not None and "replicas" in engine.stats:  # a pool of vLLM servers
        for key in ("replicas", "retried", "left"):
            metrics[f"rollout/vllm_{key}"] = float(engine.stats[key])
    return metrics
