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

from mars_core import postprocess as pp
from mars_core.run.layout import (ASSIGN_REWARDS, BUILD_PLAYERS, FILTER_STEPS, GENERATE_ROLLOUTS,
                                  PLAYERS_FILE, read_episodes, write_episodes)
from mars_core.vocab import POLICY
from tasks.stage import StageContext, iteration_stage


def _players(ctx: StageContext) -> dict[str, tuple[pp.PlayerResult, ...]]:
    frame = pl.read_parquet(ctx.inputs[BUILD_PLAYERS] / PLAYERS_FILE)
    by_episode: dict[str, list[pp.PlayerResult]] = {}
    for row in frame.iter_rows(named=True):
        by_episode.setdefault(row["episode_id"], []).append(pp.PlayerResult(**row))
    return {e: tuple(sorted(rs, key=lambda r: r.player)) for e, rs in by_episode.items()}


def _rewrite(ctx: StageContext, stage_fn, out: Path, *, source: str) -> list:
    """Apply `stage_fn(episode, players, cfg.rewards)` to every episode of stage `source` and
    write the result into `out`."""
    players = _players(ctx)
    episodes = [stage_fn(ep, players[ep.episode_id], ctx.cfg.rewards)
                for ep in read_episodes(ctx.inputs[source])]
    write_episodes(out, episodes)
    return episodes


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@iteration_stage(BUILD_PLAYERS)
def build_players(ctx: StageContext, out: Path) -> dict:
    """Outcome, responsibility and graded episode reward of every seat of every episode."""
    results = [r for ep in read_episodes(ctx.inputs[GENERATE_ROLLOUTS])
               for r in pp.build_players(ep, ctx.cfg.rewards)]
    pp.players_frame(results).write_parquet(out / PLAYERS_FILE)
    mine = [r for r in results if r.trainable]
    metrics: dict[str, float] = {}
    for game in sorted({r.game for r in mine}):
        rs = [r for r in mine if r.game == game]
        metrics[f"players/{game}/episode_reward_mean"] = _mean([r.episode_reward for r in rs])
        for outcome, n in Counter(r.outcome for r in rs).items():
            metrics[f"players/{game}/{outcome}_rate"] = n / len(rs)
    return metrics


@iteration_stage(FILTER_STEPS)
def filter_steps(ctx: StageContext, out: Path) -> dict:
    """Mark every step eligible for training or gated, with the reason."""
    episodes = _rewrite(ctx, pp.filter_steps, out, source=GENERATE_ROLLOUTS)
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


@iteration_stage(ASSIGN_REWARDS)
def assign_rewards(ctx: StageContext, out: Path) -> dict:
    """Per-step rewards, computed after the episode (MARS for OpenSpiel, In2AI for TextArena)."""
    episodes = _rewrite(ctx, pp.assign_rewards, out, source=FILTER_STEPS)
    turns = [t for ep in episodes for t in ep.turns if t.agent == POLICY and t.eligible]
    metrics = {"reward/mean": _mean([t.reward for t in turns]),
               "reward/game_mean": _mean([t.game_reward for t in turns]),
               "reward/format_mean": _mean([t.format_reward for t in turns]),
               "reward/length_mean": _mean([t.length_reward for t in turns])}
    for game in sorted({t.game for t in turns}):
        metrics[f"reward/{game}/mean"] = _mean([t.reward for t in turns if t.game == game])
    return metrics
