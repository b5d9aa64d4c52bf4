"""Task: the iteration's games of the current policy (self-play, or against the opponents the
samplers draw), stored as Parquet (one row per turn)."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.reports import rollout_metrics, transcript
from mars_core.rollout import EpisodeSpec, RolloutStats, play_episodes
from mars_core.samplers import FROZEN, is_frozen, plan_episodes
from mars_core.types import Episode, episodes_frame, episodes_from_frames, turns_frame
from tasks.common import (PUBLISH_RETRY, derive_seed, frozen_snapshots, make_engine, policy_at,
                          prompt_builder, run_stage, sampling)
from tasks.paths import read_config

STAGE = "generate_rollouts"


def plan_iteration(cfg, run_dir: str, k: int, seed: int) -> list[EpisodeSpec]:
    """Iteration k's episodes from the samplers (environment, opponent, position), with the
    `frozen` opponent placeholder replaced by one earlier checkpoint, drawn per iteration."""
    r = cfg.rollout
    pools = {g: r.opponent_pool(g, k) for g in r.games}
    specs = plan_episodes(r.games, r.episodes_per_iteration, k, seed, pools=pools,
                          weights=r.game_weights, position=r.position)
    if any(a == FROZEN for s in specs for a in s.agents):
        label = random.Random(seed).choice(sorted(frozen_snapshots(run_dir, k)))
        specs = [replace(s, agents=tuple(f"{FROZEN}:{label}" if a == FROZEN else a
                                         for a in s.agents)) for s in specs]
    return specs


def _engines(cfg, run_dir: str, k: int, specs: list[EpisodeSpec]):
    """The policy's engine, plus one per frozen checkpoint the plan names (always in
    process: a vLLM server holds the policy's weights only)."""
    policy = make_engine(cfg, policy_at(run_dir, k), log_dir=Path(run_dir))
    frozen = sorted({a for s in specs for a in s.agents if is_frozen(a)})
    if not frozen:
        return policy, policy
    snapshots = frozen_snapshots(run_dir, k)
    engines = {"policy": policy}
    engines |= {a: make_engine(cfg, snapshots[a.split(":", 1)[1]], backend="hf") for a in frozen}
    return engines, policy


def opponent_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Per game and opponent (self-play left out): episodes played and the policy's win rate,
    the numbers a curriculum is tuned by. Frozen checkpoints count as one opponent."""
    groups: dict[tuple[str, str], list[str]] = {}
    for ep in episodes:
        others = {a for a in ep.agents if a != "policy"}
        if not others or "policy" not in ep.agents:
            continue
        opponent = FROZEN if any(is_frozen(a) for a in others) else sorted(others)[0]
        seat = ep.agents.index("policy")
        groups.setdefault((ep.game, opponent), []).append(ep.outcomes[seat])
    metrics = {}
    for (game, opponent), outcomes in sorted(groups.items()):
        metrics[f"opponents/{game}/{opponent}/episodes"] = float(len(outcomes))
        metrics[f"opponents/{game}/{opponent}/win_rate"] = outcomes.count("win") / len(outcomes)
    return metrics


def write_episodes(out: Path, episodes: list[Episode]) -> None:
    episodes_frame(episodes).write_parquet(out / "episodes.parquet")
    turns_frame(episodes).write_parquet(out / "turns.parquet")


def read_episodes(folder: Path) -> list[Episode]:
    return episodes_from_frames(pl.read_parquet(folder / "episodes.parquet"),
                                pl.read_parquet(folder / "turns.parquet"))


def write_samples(out: Path, episodes: list[Episode], n_sample: int, n_transcripts: int,
                  seed: int) -> None:
    """A sample of episodes as Parquet and a few readable transcripts, for MLflow."""
    rng = random.Random(seed)
    picked = rng.sample(episodes, min(n_sample, len(episodes)))
    turns_frame(picked).write_parquet(out / "episodes_sample.parquet")
    (out / "transcripts.md").write_text("\n\n".join(transcript(e) for e in picked[:n_transcripts]))


@task(name="generate_rollouts", task_run_name="generate_rollouts iter_{k:04d}", cache_policy=NO_CACHE,
      **PUBLISH_RETRY)
def generate_rollouts(run_dir: str, k: int) -> dict:
    cfg = read_config(Path(run_dir))

    def body(out: Path) -> dict:
        seed = derive_seed(cfg, k, 1)
        specs = plan_iteration(cfg, run_dir, k, seed)
        engines, engine = _engines(cfg, run_dir, k, specs)
        stats = RolloutStats()
        episodes = play_episodes(specs, engines, prompt_builder(cfg, engine.tokenizer),
                                 sampling(cfg, seed), stats=stats,
                                 per_game=cfg.rollout.per_game_sampling(seed))
        write_episodes(out, episodes)
        write_samples(out, episodes, cfg.tracking.sample_episodes, cfg.tracking.transcripts, seed)
        metrics = {f"rollout/{key}": v for key, v in rollout_metrics(episodes).items()}
        if len(cfg.rollout.games) > 1:  # the generalist: each game's curves too
            for game in cfg.rollout.games:
                mine = [ep for ep in episodes if ep.game == game]
                metrics |= {f"rollout/{game}/{key}": v for key, v in rollout_metrics(mine).items()}
        metrics |= opponent_metrics(episodes)
        metrics["rollout/tokens_per_s"] = stats.tokens_per_s
        metrics["rollout/generated_tokens"] = float(stats.generated_tokens)
        if "reloads" in engine.stats:  # a vLLM server: requests in flight, weight reloads so far
            metrics["rollout/max_in_flight"] = float(engine.stats["max_in_flight"])
            metrics["rollout/weight_reloads"] = float(engine.stats["reloads"])
            metrics["rollout/weight_reload_s"] = engine.stats["reload_seconds"]
        return metrics

    return run_stage(run_dir, k, STAGE, body, step=k,
                     artifacts=("episodes_sample.parquet", "transcripts.md"),
                     artifact_path=f"iter_{k:04d}", datasets=("episodes.parquet", "turns.parquet"))
