"""Task: per-turn rewards from the finished episodes (MARS reward, SPEC section 2)."""
from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.rewards import assign_rewards as reward_episode
from tasks.common import run_stage
from tasks.paths import read_config, stage_dir
from tasks.rollout import STAGE as ROLLOUT, read_episodes, write_episodes

STAGE = "assign_rewards"


@task(name="assign_rewards", cache_policy=NO_CACHE)
def assign_rewards(run_dir: str, k: int) -> dict:
    cfg = read_config(Path(run_dir))

    def body(out: Path) -> dict:
        episodes = [reward_episode(ep, cfg.rewards)
                    for ep in read_episodes(stage_dir(run_dir, k, ROLLOUT))]
        write_episodes(out, episodes)
        turns = [t for ep in episodes for t in ep.turns if t.agent == "policy"]
        n = max(1, len(turns))
        return {"reward/mean": sum(t.reward for t in turns) / n,
                "reward/game_mean": sum(t.game_reward for t in turns) / n,
                "reward/format_mean": sum(t.format_reward for t in turns) / n,
                "reward/length_mean": sum(t.length_reward for t in turns) / n}

    return run_stage(run_dir, k, STAGE, body, step=k)
