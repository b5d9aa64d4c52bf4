"""Task: self-play games of the current policy, stored as Parquet (one row per turn)."""
from __future__ import annotations

import random
from pathlib import Path

import polars as pl
from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.games.bots import SELF
from mars_core.games.registry import make_game
from mars_core.reports import rollout_metrics, transcript
from mars_core.rollout import EpisodeSpec, RolloutStats, play_episodes
from mars_core.types import Episode, episodes_frame, episodes_from_frames, turns_frame
from tasks.common import derive_seed, make_engine, policy_at, prompt_builder, run_stage, sampling
from tasks.paths import read_config
from tasks.tracking import log_artifacts

STAGE = "generate_rollouts"


def self_play_specs(games: tuple[str, ...], n: int, k: int, seed: int,
                    opponents: dict[str, str] | None = None,
                    agent: str = "policy") -> list[EpisodeSpec]:
    """n games, round-robin over `games`; ids are unique per iteration and game. `agent`
    takes every seat (self-play) unless `opponents` names a bot for the game: then `agent`
    takes one seat, rotating over the game's episodes, and the bot the others."""
    specs = []
    for i in range(n):
        game = games[i % len(games)]
        players = make_game(game).num_players
        opponent = (opponents or {}).get(game, SELF)
        seat = (i // len(games)) % players
        agents = tuple(agent if opponent == SELF or p == seat else opponent
                       for p in range(players))
        specs.append(EpisodeSpec(f"it{k:04d}-{game}-{i:04d}", game, seed + i, agents))
    return specs


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


@task(name="generate_rollouts", cache_policy=NO_CACHE)
def generate_rollouts(run_dir: str, k: int) -> dict:
    cfg = read_config(Path(run_dir))

    def body(out: Path) -> dict:
        engine = make_engine(cfg, policy_at(run_dir, k))
        seed = derive_seed(cfg, k, 1)
        specs = self_play_specs(cfg.rollout.games, cfg.rollout.episodes_per_iteration, k, seed,
                                cfg.rollout.opponents)
        stats = RolloutStats()
        episodes = play_episodes(specs, engine, prompt_builder(cfg, engine.tokenizer),
                                 sampling(cfg, seed), stats=stats,
                                 per_game=cfg.rollout.per_game_sampling(seed))
        write_episodes(out, episodes)
        write_samples(out, episodes, cfg.tracking.sample_episodes, cfg.tracking.transcripts, seed)
        for name in ("episodes_sample.parquet", "transcripts.md"):  # re-logging overwrites
            log_artifacts(run_dir, out / name, f"iter_{k:04d}")
        metrics = {f"rollout/{key}": v for key, v in rollout_metrics(episodes).items()}
        if len(cfg.rollout.games) > 1:  # the generalist: each game's curves too
            for game in cfg.rollout.games:
                mine = [ep for ep in episodes if ep.game == game]
                metrics |= {f"rollout/{game}/{key}": v for key, v in rollout_metrics(mine).items()}
        metrics["rollout/tokens_per_s"] = stats.tokens_per_s
        metrics["rollout/generated_tokens"] = float(stats.generated_tokens)
        return metrics

    return run_stage(run_dir, k, STAGE, body, step=k)
