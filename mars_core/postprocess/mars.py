"""The OpenSpiel games (MARS, SPEC section 2): no step facts; rewards are MARS's own.

- Players: graded reward = the seat's game return (`Episode.returns[p]`); team "team" in the
  cooperative Hanabi games (every seat shares the score), else "player_{p}".
- Filter: only non-trainable seats are gated.
- Rewards: exactly `mars_core.postprocess.rewards.mars_turn_rewards` (game, format and length parts).
"""
from __future__ import annotations

from mars_core.postprocess import rewards
from mars_core.config import RewardsConfig
from mars_core.games.registry import game_class
from mars_core.postprocess.common import PlayerResult, apply_gates, build_results
from mars_core.types import Episode


def build_players(episode: Episode, cfg: RewardsConfig) -> tuple[PlayerResult, ...]:
    n = len(episode.agents)
    shared = game_class(episode.game).cooperative
    teams = ["team" if shared else f"player_{p}" for p in range(n)]
    return build_results(episode, teams, episode.returns)


def filter_steps(episode: Episode, players, cfg: RewardsConfig) -> Episode:
    return apply_gates(episode, players, {})


def assign_rewards(episode: Episode, players, cfg: RewardsConfig) -> Episode:
    return rewards.mars_turn_rewards(episode, cfg)
