"""The vocabularies: the one mapping between the game loop's outcomes and SPEC section 5's names,
and members that are the stored words (Parquet and JSON hold plain text)."""
from __future__ import annotations

import json

import pytest

from mars_core.config_rewards import OUTCOMES
from mars_core.postprocess.common import GATE_REASONS
from mars_core.vocab import ErrorType, GateReason, Outcome, PlayerOutcome, player_outcome


@pytest.mark.parametrize("recorded, error, named", [
    (Outcome.WIN, "", PlayerOutcome.WIN), (Outcome.LOSS, "", PlayerOutcome.LOSS),
    (Outcome.DRAW, "", PlayerOutcome.DRAW),
    (Outcome.INVALID, ErrorType.PARSING_FAILURE, PlayerOutcome.PARSING_FAILURE),
    (Outcome.INVALID, ErrorType.INVALID_ACTION, PlayerOutcome.INVALID_ACTION),
    (Outcome.OTHER_INVALID, ErrorType.INVALID_ACTION, PlayerOutcome.OTHER_PLAYER_INVALID_ACTION),
])
def test_each_recorded_outcome_has_one_spec_name(recorded, error, named):
    assert player_outcome(recorded, error) is named
    assert player_outcome(str(recorded.value), str(error)) is named  # as read back from Parquet


@pytest.mark.parametrize("recorded, error", [("invalid", ""), ("won", ""), ("", "")])
def test_a_word_of_neither_vocabulary_is_refused(recorded, error):
    with pytest.raises(ValueError):
        player_outcome(recorded, error)


def test_members_are_the_stored_words():
    assert json.dumps([Outcome.WIN, GateReason.NOT_TRAINABLE]) == '["win", "not_trainable"]'
    assert OUTCOMES == tuple(o.value for o in PlayerOutcome) and "invalid_action" in OUTCOMES
    assert GATE_REASONS == tuple(r.value for r in GateReason)
    assert all(type(w) is str for w in (*OUTCOMES, *GATE_REASONS))
