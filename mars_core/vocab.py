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


class FinishReason(StrEnum):
    """Why sampling stopped (`Completion.finish_reason`, `Turn.finish_reason`; "" on a bot's
    turn). `cut_off` says whether a length limit ended the reply: the flag the Action
    Validator and the arena read (never the text of `Turn.error_detail`)."""

    STOP = "stop"  # end of sequence or a stop string
    LENGTH = "length"  # cut off at the token limit (`max_new_tokens`)
    CONTEXT_OVERFLOW = "context_overflow"  # the prompt left no room for a reply
    ABORT = "abort"  # a server gave the request up
    ERROR = "error"  # no reply: the request failed (chat engines; `ChatReply.error` says why)

    @property
    def cut_off(self) -> bool:
        return self in (FinishReason.LENGTH, FinishReason.CONTEXT_OVERFLOW)

    @classmethod
    def of(cls, word: str | None, default: FinishReason) -> FinishReason:
        """A server's `finish_reason` word as a member: `default` when it sent none, ABORT for
        a word of no member (an OpenAI `content_filter`, `tool_calls`: the reply ended early,
        not at a length limit)."""
        if not word:
            return default
        return cls(word) if word in cls._value2member_map_ else cls.ABORT


class Cause(StrEnum):
    """Why a finished arena game was won or lost, from one seat's side (MindGames' loss
    attribution, `arena.attribution`)."""

    STRATEGY = "strategy"  # played to its end under the rules: the better play won
    OWN_RULE_ERROR = "own_rule_error"  # this seat's side broke the rules
    OPPONENT_RULE_ERROR = "opponent_rule_error"  # another side did
    TIMEOUT = "timeout"  # a length limit decided it (a cut-off reply, the game's move limit)


class DecidedBy(StrEnum):
    """How an arena game ended (`arena.attribution`)."""

    PLAY = "play"  # played out
    RULE_ERROR = "rule_error"  # a side's reply broke the rules
    LENGTH = "length"  # a side's reply was cut off (`FinishReason.cut_off`)
    MOVE_LIMIT = "move_limit"  # scored as it stood at the game's move limit


# "" where a typed field holds no member: a valid turn's `error`, an eligible turn's
# `gate_reason`, a bot turn's `finish_reason` (Parquet and JSON keep the empty word)
NONE = ""


def as_member(enum: type[StrEnum], word: str | None, field: str) -> StrEnum | str:
    """`word` as a member of `enum`, or "" for ""/None (a column an older file lacks reads as
    null); ValueError naming `field` for a word outside the vocabulary."""
    if not word:
        return NONE
    try:
        return enum(word)
    except ValueError:
        words = ", ".join(m.value for m in enum)
        raise ValueError(f"{field}: {word!r} is not one of {words}") from None


# Who sits at a seat (`Episode.agents`, `Turn.agent`) or may be asked to: the policy being
# trained or evaluated, a bot (`bot:<name>`), an earlier checkpoint of the run (`frozen`, played
# as `frozen:<label>`), or `self` (as an opponent: the policy takes the other seats).
POLICY = "policy"
SELF = "self"
FROZEN = "frozen"
BOT_PREFIX = "bot:"
