"""Rewards: the MARS reward shaping (`rewards`) and the TextArena games' post-episode step
rewards (`rewards.in2ai`)."""
from __future__ import annotations

from pydantic import Field, model_validator

from mars_core.config.base import _Section
from mars_core.vocab import PlayerOutcome

OUTCOMES = tuple(o.value for o in PlayerOutcome)  # SPEC section 5's names


class In2AIRewards(_Section):
    """Post-episode step rewards of the TextArena games (In2AI, SPEC section 5). The published
    constants are not public: these defaults are ours. Order: a step's shaped reward, then
    positive rewards times the episode outcome's multiplier, then clipped to
    [shaped_min, clip]; the step that broke the rules gets its floor instead, below any
    shaped reward."""

    clip: float = Field(1.0, gt=0)  # every step reward lies in [-clip, clip]
    shaped_min: float = -0.8  # lowest shaped reward: the error floors stay below it
    parsing_failure: float = -1.0  # floor of a reply without the template or action format
    invalid_action: float = -0.9  # floor of a well-formed action the rules forbid
    # positive step rewards are scaled by the player's episode outcome
    outcome_multiplier: dict[str, float] = Field(default_factory=lambda: {
        "win": 1.0, "draw": 0.6, "loss": 0.3, "invalid_action": 0.3, "parsing_failure": 0.3,
        "other_player_invalid_action": 0.6})
    blotto_round_win: float = 1.0  # a Blotto round won / tied / lost
    blotto_round_tie: float = 0.0
    blotto_round_loss: float = -0.5
    codenames_own: float = 1.0  # a Codenames guess of an own-team word
    codenames_neutral: float = -0.25  # ... of a neutral word
    codenames_opponent: float = -0.5  # ... of the other team's word
    codenames_assassin: float = -1.0  # ... of the assassin: poisons the whole clue group
    codenames_pass: float = 0.0  # an operative's [pass]
    mafia_win: float = 1.0  # every Mafia step: its team's result ...
    mafia_loss: float = -0.5
    mafia_vote_hit: float = 0.25  # ... plus, for a vote, this when the target is on the other team
    mafia_vote_miss: float = -0.25  # ... or this when the target is a teammate

    @model_validator(mode="after")
    def _floors(self):
        if set(self.outcome_multiplier) != set(OUTCOMES):
            raise ValueError("rewards.in2ai.outcome_multiplier must name exactly: "
                             + ", ".join(OUTCOMES))
        if not -self.clip <= self.parsing_failure <= self.invalid_action < self.shaped_min:
            raise ValueError("rewards.in2ai floors must satisfy -clip <= parsing_failure <= "
                             "invalid_action < shaped_min, so errors rank below any shaped reward")
        return self


class RewardsConfig(_Section):
    valid_action: float = 0.05
    invalid_action: float = -10.0
    draw: float = 0.1
    length_alpha: float = 0.5
    length_min: int = 11
    length_max: int = 2048
    game_scale: dict[str, float] = Field(default_factory=dict)  # e.g. {tic_tac_toe: 2.0}
    in2ai: In2AIRewards = In2AIRewards()  # the TextArena games' post-episode rewards

    @model_validator(mode="after")
    def _lengths(self):
        if self.length_max <= self.length_min:
            raise ValueError("rewards.length_max must be greater than rewards.length_min")
        return self
