"""The project's vocabularies, one enumeration each (a leaf: no imports of ours).

Two outcome vocabularies exist on purpose, with one mapping between them (`player_outcome`):
the game loop records what happened at the table (`Outcome`: whose reply ended the game), the
post-episode pipeline names each seat's outcome as SPEC section 5 does (`PlayerOutcome`, the
In2AI reward multipliers' keys). Members are `str`s: they compare equal to the stored text, so
Parquet, JSON and configs hold the plain words.
"""
from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """A seat's result as the game loop records it (`Episode.outcomes`)."""

    WIN = "win"
    LOSS = "loss"
    DRAW = "draw"
    INVALID = "invalid"  # this seat's reply broke the rules and ended the game
    OTHER_INVALID = "other_invalid"  # another seat's reply did


class ErrorType(StrEnum):
    """Why a reply is not a move (`Turn.error`, `Episode.error`; "" when it is one)."""

    PARSING_FAILURE = "parsing_failure"  # no answer in the expected format
    INVALID_ACTION = "invalid_action"  # an answer, but not a legal move


class PlayerOutcome(StrEnum):
    """A seat's outcome in SPEC section 5's names (`PlayerResult.outcome`)."""

    WIN = "win"
    DRAW = "draw"
    LOSS = "loss"
    INVALID_ACTION = "invalid_action"
    PARSING_FAILURE = "parsing_failure"
    OTHER_PLAYER_INVALID_ACTION = "other_player_invalid_action"


def player_outcome(outcome: str, error: str) -> PlayerOutcome:
    """The SPEC name of a seat's recorded outcome (`error`: the episode's error type, which
    names the offender's outcome). ValueError for a word of neither vocabulary."""
    if outcome == Outcome.INVALID:
        return PlayerOutcome(ErrorType(error))  # the offender: what was wrong with its reply
    if outcome == Outcome.OTHER_INVALID:
        return PlayerOutcome.OTHER_PLAYER_INVALID_ACTION
    return PlayerOutcome(outcome)


class GateReason(StrEnum):
    """Why the Steps Filter keeps a step out of training (`Turn.gate_reason`)."""

    NOT_TRAINABLE = "not_trainable"  # an opponent's (bot, frozen checkpoint) turn
    DEPENDS_ON_INVALID_STEP = "depends_on_invalid_step"
    UNFINISHED_UNIT = "unfinished_unit"
    OUTCOME_UNOBSERVED = "outcome_unobserved"


# Who sits at a seat (`Episode.agents`, `Turn.agent`) or may be asked to: the policy being
# trained or evaluated, a bot (`bot:<name>`), an earlier checkpoint of the run (`frozen`, played
# as `frozen:<label>`), or `self` (as an opponent: the policy takes the other seats).
POLICY = "policy"
SELF = "self"
FROZEN = "frozen"
BOT_PREFIX = "bot:"
