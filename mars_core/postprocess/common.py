"""What every post-episode pipeline shares (SPEC section 5): the player record, the outcome
vocabulary, gating, and the In2AI step-reward arithmetic.

- Outcomes: `Episode.outcomes` says "invalid" for the seat whose reply ended the game and
  "other_invalid" for the others; the Players Builder names the offender's outcome by the
  episode's error type (`parsing_failure` / `invalid_action`) and the others'
  `other_player_invalid_action` (config.OUTCOMES).
- Gating: a non-trainable seat's steps are always gated "not_trainable"; a game's own reasons
  apply to trainable seats only, and never to the step that broke the rules (it is trained
  with its floor).
- Rewards (`cfg.in2ai`): the error step gets its floor (`parsing_failure` / `invalid_action`)
  in `format_reward`; any other step's shaped value s is scaled by the player's outcome
  multiplier when positive, then clipped to [shaped_min, clip]; that value is its
  `game_reward`, so `reward = game_reward + format_reward` (`length_reward` is 0).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from mars_core.config import In2AIRewards
from mars_core.games.base import PARSING_FAILURE
from mars_core.types import Episode, Turn
from mars_core.vocab import POLICY, GateReason, PlayerOutcome, player_outcome as player_outcome_name

NOT_TRAINABLE = GateReason.NOT_TRAINABLE
DEPENDS_ON_INVALID_STEP = GateReason.DEPENDS_ON_INVALID_STEP
UNFINISHED_UNIT = GateReason.UNFINISHED_UNIT
OUTCOME_UNOBSERVED = GateReason.OUTCOME_UNOBSERVED
GATE_REASONS = tuple(r.value for r in GateReason)


@dataclass(frozen=True)
class PlayerResult:
    """One seat of one finished episode, as the Players Builder sees it."""

    episode_id: str
    game: str
    player: int
    role: str  # its first turn's role, or "player_{p}" when it never moved
    team: str
    agent: str
    trainable: bool  # agent == vocab.POLICY
    outcome: PlayerOutcome  # SPEC section 5's name (config.OUTCOMES); Parquet keeps the word
    caused_end: bool  # its rule error ended the episode
    episode_reward: float  # the graded episode reward

    def __post_init__(self):  # read back from Parquet as text: the member (a bad word raises)
        object.__setattr__(self, "outcome", PlayerOutcome(self.outcome))


def facts(text: str) -> dict:
    """A step's or episode's JSON facts ("" means none)."""
    return json.loads(text) if text else {}


def player_outcome(episode: Episode, player: int) -> PlayerOutcome:
    raw = episode.outcomes[player]
    try:
        return player_outcome_name(raw, episode.error)
    except ValueError:
        raise ValueError(f"episode {episode.episode_id}: unknown outcome {raw!r} of seat "
                         f"{player}") from None


def first_role(episode: Episode, player: int) -> str:
    return next((t.role for t in episode.turns if t.player == player), f"player_{player}")


def build_results(episode: Episode, teams: Sequence[str],
                  graded: Sequence[float]) -> tuple[PlayerResult, ...]:
    """One `PlayerResult` per seat, given each seat's team and graded episode reward."""
    return tuple(
        PlayerResult(episode_id=episode.episode_id, game=episode.game, player=p,
                     role=first_role(episode, p), team=teams[p], agent=agent,
                     trainable=agent == POLICY, outcome=player_outcome(episode, p),
                     caused_end=p == episode.error_player, episode_reward=float(graded[p]))
        for p, agent in enumerate(episode.agents))


def is_error_step(turn: Turn) -> bool:
    return not turn.valid or bool(turn.error)


def error_index(episode: Episode) -> int | None:
    """The index of the step that broke the rules (always the last turn), if any."""
    if episode.turns and is_error_step(episode.turns[-1]):
        return len(episode.turns) - 1
    return None


def apply_gates(episode: Episode, players: Sequence[PlayerResult],
                reasons: Mapping[int, str]) -> Episode:
    """Set `eligible`/`gate_reason` on every turn: not_trainable first, then `reasons` (turn
    index -> reason) for trainable seats' steps other than the error step."""
    _check_players(episode, players)
    turns = []
    for i, t in enumerate(episode.turns):
        reason = NOT_TRAINABLE if not players[t.player].trainable else (
            "" if is_error_step(t) else reasons.get(i, ""))
        turns.append(replace(t, eligible=not reason, gate_reason=reason))
    return replace(episode, turns=tuple(turns))


def floor(turn: Turn, c: In2AIRewards) -> float:
    return c.parsing_failure if turn.error == PARSING_FAILURE else c.invalid_action


def shape(value: float, outcome: str, c: In2AIRewards) -> float:
    """Positive values times the outcome's multiplier, then clipped to [shaped_min, clip]."""
    if value > 0:
        value *= c.outcome_multiplier[outcome]
    return min(c.clip, max(c.shaped_min, value))


def apply_rewards(episode: Episode, players: Sequence[PlayerResult], c: In2AIRewards,
                  shaped: Callable[[int, Turn], float]) -> Episode:
    """Fill every turn's reward parts: the floor on the error step, else `shaped(i, turn)`
    scaled by the player's outcome and clipped."""
    _check_players(episode, players)
    turns = []
    for i, t in enumerate(episode.turns):
        if is_error_step(t):
            game, fmt = 0.0, floor(t, c)
        else:
            game, fmt = shape(shaped(i, t), players[t.player].outcome, c), 0.0
        turns.append(replace(t, game_reward=game, format_reward=fmt, length_reward=0.0,
                             reward=game + fmt))
    return replace(episode, turns=tuple(turns))


def _check_players(episode: Episode, players: Sequence[PlayerResult]) -> None:
    if len(players) != len(episode.agents) or any(
            r.episode_id != episode.episode_id for r in players):
        raise ValueError(f"the player results do not belong to episode {episode.episode_id}")
