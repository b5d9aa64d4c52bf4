"""The post-episode pipeline (SPEC section 5), one pure stage after another:

    build_players(episode) -> filter_steps(episode, players) -> assign_rewards(episode, players)

Each game has a module of this package with these three functions, named by its record in
`mars_core/games/catalog.py` (`PIPELINES`, by game name); the OpenSpiel games share `mars`
(MARS rewards), the TextArena games follow the In2AI rules (`blotto`, `codenames`, `ipd`,
`mafia`). Every stage returns new frozen records and never mutates its input. `rewards`: the
MARS per-turn rewards.

May import: config, games, run, types, vocab.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from importlib import import_module
from types import ModuleType

import polars as pl

from mars_core.config import RewardsConfig
from mars_core.games.catalog import CATALOG, record
from mars_core.run.layout import ASSIGN_REWARDS, BUILD_PLAYERS, FILTER_STEPS
from mars_core.postprocess.common import (DEPENDS_ON_INVALID_STEP, GATE_REASONS, NOT_TRAINABLE,
                                          OUTCOME_UNOBSERVED, UNFINISHED_UNIT, PlayerResult)
from mars_core.types import Episode

# a pipeline module's three functions, named as the training flow's stages they run in
STAGES = (BUILD_PLAYERS, FILTER_STEPS, ASSIGN_REWARDS)


def _pipeline_module(game: str, key: str) -> ModuleType:
    """The module `key` of this package, which a game's record names; one line if it is none."""
    try:
        module = import_module(f"{__name__}.{key}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{key}":
            raise
        raise ValueError(f"game {game}: no post-episode pipeline {key!r} "
                         f"(no module {__name__}.{key})") from None
    missing = [f for f in STAGES if not callable(getattr(module, f, None))]
    if missing:
        raise ValueError(f"game {game}: pipeline {key!r} lacks {', '.join(missing)}")
    return module


# game name -> its post-episode module, from the catalog's records
PIPELINES: dict[str, ModuleType] = {g.name: _pipeline_module(g.name, g.pipeline) for g in CATALOG}

PLAYER_SCHEMA = {
    "episode_id": pl.Utf8, "game": pl.Utf8, "player": pl.Int64, "role": pl.Utf8,
    "team": pl.Utf8, "agent": pl.Utf8, "trainable": pl.Boolean, "outcome": pl.Utf8,
    "caused_end": pl.Boolean, "episode_reward": pl.Float64,
}

__all__ = ["PIPELINES", "PLAYER_SCHEMA", "GATE_REASONS", "NOT_TRAINABLE",
           "DEPENDS_ON_INVALID_STEP", "UNFINISHED_UNIT", "OUTCOME_UNOBSERVED", "PlayerResult",
           "pipeline", "build_players", "filter_steps", "assign_rewards", "players_frame",
           "gate_counts"]


def pipeline(game: str) -> ModuleType:
    """The post-episode module of a game; unknown names list the known ones."""
    if game in PIPELINES:
        return PIPELINES[game]
    try:
        rec = record(game)  # an engine's game by name: its family's default pipeline
    except ValueError:
        raise ValueError(f"no post-episode pipeline for game {game!r}; known games: "
                         + ", ".join(PIPELINES)) from None
    return _pipeline_module(game, rec.pipeline)


def build_players(episode: Episode, cfg: RewardsConfig) -> tuple[PlayerResult, ...]:
    """Players Builder: one `PlayerResult` per seat (outcome, who ended it, graded reward)."""
    return pipeline(episode.game).build_players(episode, cfg)


def filter_steps(episode: Episode, players: Sequence[PlayerResult],
                 cfg: RewardsConfig) -> Episode:
    """Steps Filter: the episode with `eligible` and `gate_reason` set on every turn."""
    return pipeline(episode.game).filter_steps(episode, players, cfg)


def assign_rewards(episode: Episode, players: Sequence[PlayerResult],
                   cfg: RewardsConfig) -> Episode:
    """Reward Assigner: the episode with every turn's reward and its parts filled in."""
    return pipeline(episode.game).assign_rewards(episode, players, cfg)


def players_frame(results: Iterable[PlayerResult]) -> pl.DataFrame:
    """One row per `PlayerResult`, with the columns of `PLAYER_SCHEMA`."""
    return pl.DataFrame([asdict(r) for r in results], schema=PLAYER_SCHEMA)


def gate_counts(episodes: Iterable[Episode]) -> dict[str, int]:
    """How many turns each gate reason removed from training (every reason, zeros included)."""
    counts = dict.fromkeys(GATE_REASONS, 0)
    for ep in episodes:
        for t in ep.turns:
            if t.gate_reason:
                counts[t.gate_reason] = counts.get(t.gate_reason, 0) + 1
    return counts
