"""MARS per-turn rewards (SPEC section 2), computed after the episode from what it recorded.

game reward: the engine's step rewards credited to the player's own last turn (done during
play), plus `draw` on a drawn board game's last turn of each seat (not on a split pot or a
partial Hanabi score), scaled per game (`game_scale`, e.g. Tic-Tac-Toe x2 in multi-game
training); format: +valid_action for a valid move, invalid_action (-10) for the reply that
broke the rules (its forfeit loss is already in the game reward); length: `-alpha * max(0, (L - l_max) / (l_max - l_min))` on the reply's token count.
"""
from __future__ import annotations

from dataclasses import replace

from mars_core.config import RewardsConfig
from mars_core.games.registry import game_class
from mars_core.types import Episode, Turn
from mars_core.vocab import Outcome


def length_penalty(n_tokens: int, alpha: float, l_min: int, l_max: int) -> float:
    return -alpha * max(0.0, (n_tokens - l_max) / (l_max - l_min))


def _turn_rewards(t: Turn, game_reward: float, cfg: RewardsConfig) -> Turn:
    scale = cfg.game_scale.get(t.game, 1.0)
    game = scale * game_reward
    fmt = cfg.valid_action if t.valid else cfg.invalid_action
    length = length_penalty(len(t.completion_ids), cfg.length_alpha, cfg.length_min, cfg.length_max)
    return replace(t, game_reward=game, format_reward=fmt, length_reward=length,
                   reward=game + fmt + length)


def mars_turn_rewards(episode: Episode, cfg: RewardsConfig) -> Episode:
    """The episode with every turn's reward parts and total filled in."""
    draw_bonus = game_class(episode.game).draw_bonus
    last_of: dict[int, int] = {}
    for i, t in enumerate(episode.turns):
        last_of[t.player] = i
    turns = []
    for i, t in enumerate(episode.turns):
        game = t.game_reward
        if draw_bonus and episode.outcomes[t.player] == Outcome.DRAW and last_of[t.player] == i:
            game += cfg.draw
        turns.append(_turn_rewards(t, game, cfg))
    return replace(episode, turns=tuple(turns))
