"""The vocabularies: the one mapping between the game loop's outcomes and SPEC section 5's names,
members that are the stored words (Parquet and JSON hold plain text), and the records' fields
typed with them."""
from __future__ import annotations

import json
from dataclasses import asdict, replace

import polars as pl
import pytest

from mars_core.config.rewards import OUTCOMES
from mars_core.postprocess import players_frame
from mars_core.postprocess.common import GATE_REASONS, PlayerResult
from mars_core.types import Episode, Turn, episodes_frame, episodes_from_frames, turns_frame
from mars_core.vocab import (ErrorType, FinishReason, GateReason, Outcome, PlayerOutcome,
                             player_outcome)


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


def _turn(**kw) -> Turn:
    return Turn("e", "tic_tac_toe", 0, 0, "player_0", "policy", "board", **kw)


def test_typed_fields_hold_members_and_refuse_other_words():
    t = _turn(error="parsing_failure", gate_reason="not_trainable", finish_reason="length")
    assert t.error is ErrorType.PARSING_FAILURE and t.gate_reason is GateReason.NOT_TRAINABLE
    assert t.finish_reason is FinishReason.LENGTH and t.finish_reason.cut_off
    assert _turn().error == _turn().gate_reason == _turn().finish_reason == ""  # none
    for field, word in (("error", "timeout"), ("gate_reason", "invalid"),
                        ("finish_reason", "truncated")):
        with pytest.raises(ValueError, match=f"Turn.{field}: '{word}' is not one of"):
            _turn(**{field: word})
    with pytest.raises(ValueError):
        PlayerResult("e", "g", 0, "r", "t", "policy", True, "won", False, 0.0)
    assert PlayerResult("e", "g", 0, "r", "t", "policy", True, "win", False, 0.0).outcome \
        is PlayerOutcome.WIN


def test_typed_fields_round_trip_through_parquet_and_json_as_the_plain_words(tmp_path):
    turns = (_turn(reply="x", finish_reason=FinishReason.LENGTH, valid=False,
                   error=ErrorType.PARSING_FAILURE, eligible=False,
                   gate_reason=GateReason.DEPENDS_ON_INVALID_STEP),
             replace(_turn(), turn=1, player=1, agent="bot:random"))
    ep = Episode("e", "tic_tac_toe", 0, ("policy", "bot:random"), (-1.0, 0.0),
                 ("invalid", "other_invalid"), 0, ErrorType.PARSING_FAILURE, "", turns)
    turns_frame([ep]).write_parquet(tmp_path / "t.parquet")
    episodes_frame([ep]).write_parquet(tmp_path / "e.parquet")
    stored = pl.read_parquet(tmp_path / "t.parquet")
    assert stored["error"].to_list() == ["parsing_failure", ""]
    assert stored["finish_reason"].to_list() == ["length", ""]
    assert stored["gate_reason"].to_list() == ["depends_on_invalid_step", ""]
    [back] = episodes_from_frames(pl.read_parquet(tmp_path / "e.parquet"), stored)
    assert back == ep and back.turns[0].error is ErrorType.PARSING_FAILURE
    assert json.loads(json.dumps(asdict(back.turns[0])))["finish_reason"] == "length"
    players = players_frame([PlayerResult("e", "g", 0, "r", "t", "policy", True,
                                          PlayerOutcome.PARSING_FAILURE, True, -1.0)])
    assert players["outcome"].to_list() == ["parsing_failure"]
    # a file written before the column existed reads as "no finish reason"
    [old] = episodes_from_frames(pl.read_parquet(tmp_path / "e.parquet"),
                                 stored.drop("finish_reason"))
    assert [t.finish_reason for t in old.turns] == ["", ""]


def test_a_server_finish_reason_is_a_member():
    assert FinishReason.of("length", FinishReason.STOP) is FinishReason.LENGTH
    assert FinishReason.of(None, FinishReason.LENGTH) is FinishReason.LENGTH
    assert FinishReason.of("content_filter", FinishReason.STOP) is FinishReason.ABORT
    assert not FinishReason.ABORT.cut_off and FinishReason.CONTEXT_OVERFLOW.cut_off
