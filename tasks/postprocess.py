"""Tasks: the post-episode stages between rollout and batching (SPEC section 5), the same three
for every game (the OpenSpiel games' MARS rewards are one more assigner):

    build_players -> filter_steps -> assign_rewards

Each reads the previous stage's folder, calls the pure functions of `mars_core.postprocess`,
writes Parquet and logs counts: outcomes and graded episode rewards per game, gated steps by
reason, per-game step rewards.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core import postprocess as pp
from mars_core.run.layout import (ASSIGN_REWARDS, BUILD_PLAYERS, FILTER_STEPS, GENERATE_ROLLOUTS,
                                  PLAYERS_FILE, input_dir, read_episodes, write_episodes)
from mars_core.vocab import POLICY
from tasks.stage_runner import PUBLISH_RETRY, run_stage
from tasks.paths import read_config


def _players(run_dir: str, k: int, *, reader: str) -> dict[str, tuple[pp.PlayerResult, ...]]:
    players = input_dir(run_dir, k, reader=reader, stage=BUILD_PLAYERS)
    frame = pl.read_parquet(players / PLAYERS_FILE)
    by_episode: dict[str, list[pp.PlayerResult]] = {}
    for row in frame.iter_rows(named=True):
        by_episode.setdefault(row["episode_id"], []).append(pp.PlayerResult(**row))
    return {e: tuple(sorted(rs, key=lambda r: r.player)) for e, rs in by_episode.items()}


def _rewrite(run_dir: str, k: int, stage_fn, cfg, out: Path, *, reader: str,
             source: str) -> list:
    """Stage `reader`: apply `stage_fn(episode, players, cfg.rewards)` to every episode of
    stage `source` and write the result into `out`."""
    players = _players(run_dir, k, reader=reader)
    episodes = [stage_fn(ep, players[ep.episode_id], cfg.rewards)
                for ep in read_episodes(input_dir(run_dir, k, reader=reader, stage=source))]
    write_episodes(out, episodes)
    return episodes


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@task(task_run_name=BUILD_PLAYERS + " iter_{k:04d}", cache_policy=NO_CACHE, **PUBLISH_RETRY)
def build_players(run_dir: str, k: int) -> dict:
    """Outcome, responsibility and graded episode reward of every seat of every episode."""
    cfg = read_config(Path(run_dir))

    def body(out: Path) -> dict:
        games = input_dir(run_dir, k, reader=BUILD_PLAYERS, stage=GENERATE_ROLLOUTS)
        results = [r for ep in read_episodes(games)
                   for r in pp.build_players(ep, cfg.rewards)]
        pp.players_frame(results).write_parquet(out / PLAYERS_FILE)
        mine = [r for r in results if r.trainable]
        metrics: dict[str, float] = {}
        for game in sorted({r.game for r in mine}):
            rs = [r for r in mine if r.game == game]
            metrics[f"players/{game}/episode_reward_mean"] = _mean([r.episode_reward for r in rs])
            for outcome, n in Counter(r.outcome for r in rs).items():
                metrics[f"players/{game}/{outcome}_rate"] = n / len(rs)
        return metrics

    return run_stage(run_dir, k, BUILD_PLAYERS, body, step=k)


@task(task_run_name=FILTER_STEPS + " iter_{k:04d}", cache_policy=NO_CACHE, **PUBLISH_RETRY)
def filter_steps(run_dir: str, k: int) -> dict:
    """Mark every step eligible for training or gated, with the reason."""
    cfg = read_config(Path(run_dir))

    def body(out: Path) -> dict:
        episodes = _rewrite(run_dir, k, pp.filter_steps, cfg, out, reader=FILTER_STEPS,
                            source=GENERATE_ROLLOUTS)
        counts = pp.gate_counts(episodes)
        turns = [t for ep in episodes for t in ep.turns]
        metrics = {f"gated/{reason}": float(n) for reason, n in counts.items()}
        metrics["gated/total"] = float(sum(counts.values()))
        metrics["steps/eligible"] = float(sum(t.eligible for t in turns))
        for game in sorted({ep.game for ep in episodes}):
            mine = [ep for ep in episodes if ep.game == game]
            for reason, n in pp.gate_counts(mine).items():
                metrics[f"gated/{game}/{reason}"] = float(n)
        return metrics

    return run_stage(run_dir, k, FILTER_STEPS, body, step=k)


@task(task_run_name=ASSIGN_REWARDS + " iter_{k:04d}", cache_policy=NO_CACHE, **PUBLISH_RETRY)
def assign_rewards(run_dir: str, k: int) -> dict:
    """Per-step rewards, computed after the episode (MARS for OpenSpiel, In2AI for TextArena)."""
    cfg = read_config(Path(run_dir))

    def body(out: Path) -> dict:
        episodes = _rewrite(run_dir, k, pp.assign_rewards, cfg, out, reader=ASSIGN_REWARDS,
                            source=FILTER_STEPS)
        turns = [t for ep in episodes for t in ep.turns if t.agent == POLICY and t.eligible]
        metrics = {"reward/mean": _mean([t.reward for t in turns]),
                   "reward/game_mean": _mean([t.game_reward for t in turns]),
                   "reward/format_mean": _mean([t.format_reward for t in turns]),
                   "reward/length_mean": _mean([t.length_reward for t in turns])}
        for game in sorted({t.game for t in turns}):
            metrics[f"reward/{game}/mean"] = _mean([t.reward for t in turns if t.game == game])
        return metrics

    return run_stage(run_dir, k, ASSIGN_REWARDS, body, step=k)
