"""MLflow traces of finished conversations and games (tasks/traces.py): one trace per
conversation and per game, a span per agent turn with its prompt, reply, tokens and verdict,
linked to the run; a gated question's text never reaches the store; a tracing failure is a
warning, not a failed evaluation. (The flows' own traces: test_mas_eval.py, test_arena.py.)"""
from __future__ import annotations

import json
import logging

import mlflow
import pytest
from mlflow import MlflowClient

from eval.systems import Result
from mars_core.types import Episode, Turn
from tasks.traces import GATED, log_conversation_traces, log_game_traces

SECRET = "Which made-up particle decays first?"


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("traces", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(exp).info.run_id
    return uri, client, exp, run


def _turn(agent, prompt, reply, **extra):
    return {"agent": agent, "prompt": prompt, "reply": reply, "finish_reason": "stop",
            "error": "", **extra}


def _results():
    mad = Result("mad", "gsm8k", "q1", "42", "The answer is \\boxed{42}", "judge", 3, 4, 400, 90,
                 transcript=[_turn("affirmative", "Give your answer.", "It is 41."),
                             _turn("negative", "The affirmative side answered", "No, 42."),
                             _turn("moderator", "Round 1 is over.", '{"preference": "no"}'),
                             _turn("judge", "What is the correct answer?", "\\boxed{42}")],
                 correct=True, extracted="42")
    single = Result("single", "gsm8k", "q2", "7", "\\boxed{8}", "answered", 1, 1, 30, 5,
                    transcript=[_turn("single", "What is 3 + 4?", "\\boxed{8}")], extracted="8")
    timed = Result("autogen", "aqua", "q3", "B", "B", "terminate", 1, 2, 50, 12,
                   transcript=[_turn("assistant", "Pick one.", "B TERMINATE", prompt_tokens=20,
                                     completion_tokens=8, start=1000.0, end=1002.5),
                               _turn("user_proxy", "Check it.", "TERMINATE", prompt_tokens=30,
                                     completion_tokens=4, start=1003.0, end=1003.5)],
                   correct=True, extracted="B")
    gated = Result("single", "gpqa_diamond", "r0", "C", f"{SECRET} quarkonium (C)", "answered", 1,
                   1, 60, 9, transcript=[_turn("single", SECRET, "quarkonium, so (C)")],
                   correct=True, extracted="C")
    return [mad, single, timed, gated]


def _traces(client, exp, run):
    got = client.search_traces(locations=[exp], run_id=run, max_results=1000)
    return {t.info.tags["mlflow.traceName"]: t for t in got}


def test_every_conversation_is_a_trace_with_a_span_per_turn(store, tmp_path):
    uri, client, exp, run = store
    default = mlflow.get_tracking_uri()
    ids = log_conversation_traces(uri, exp, run, _results(), "tiny", {"gpqa_diamond"})
    assert len(ids) == 4 and mlflow.get_tracking_uri() == default  # no global state touched
    traces = _traces(client, exp, run)
    assert set(traces) == {"mad gsm8k q1", "single gsm8k q2", "autogen aqua q3",
                           "single gpqa_diamond r0"}
    mad = traces["mad gsm8k q1"]
    assert mad.info.trace_metadata["mlflow.sourceRun"] == run
    assert mad.info.tags["mars.kind"] == "mas-eval" and mad.info.tags["mars.system"] == "mad"
    root, *turns = sorted(mad.data.spans, key=lambda s: (s.parent_id is not None, s.start_time_ns))
    assert root.parent_id is None and len(turns) == 4
    assert [s.name for s in turns] == ["affirmative 1", "negative 1", "moderator 1", "judge 1"]
    assert all(s.parent_id == root.span_id for s in turns)
    assert turns[1].inputs["messages"][0]["content"] == "The affirmative side answered"
    assert turns[1].outputs == "No, 42."
    assert root.inputs["question_id"] == "q1" and root.inputs["benchmark"] == "gsm8k"
    assert root.outputs["extracted"] == "42" and root.outputs["correct"] is True
    assert root.attributes["mars.prompt_tokens"] == 400
    assert turns[-1].attributes["mars.verdict"] == "correct"
    [grade] = mad.info.assessments
    assert grade.name == "correct" and grade.value is True
    # one call: the conversation's tokens are the call's; calls with their own count keep it
    single = traces["single gsm8k q2"]
    [call] = [s for s in single.data.spans if s.parent_id]
    assert (call.attributes["mars.prompt_tokens"], call.attributes["mars.completion_tokens"]) \
        == (30, 5)
    assert call.attributes["mars.verdict"] == "wrong"
    assert single.info.tags["mars.correct"] == "false"
    timed = traces["autogen aqua q3"]
    calls = sorted((s for s in timed.data.spans if s.parent_id), key=lambda s: s.start_time_ns)
    assert [s.attributes["mars.completion_tokens"] for s in calls] == [8, 4]
    assert calls[0].start_time_ns == 1000 * 10 ** 9 and calls[1].end_time_ns == 1003.5 * 10 ** 9
    # searchable by tag, and the gated question's text is nowhere in the store
    found = client.search_traces(locations=[exp], filter_string="tag.`mars.benchmark` = 'aqua'")
    assert [t.info.tags["mlflow.traceName"] for t in found] == ["autogen aqua q3"]
    gpqa = traces["single gpqa_diamond r0"]
    assert len(gpqa.data.spans) == 2 and gpqa.info.tags["mars.correct"] == "true"
    assert GATED in gpqa.to_json() and "quarkonium" not in gpqa.to_json()
    stored = (tmp_path / "mlflow.db").read_bytes()
    assert b"made-up particle" not in stored and b"quarkonium" not in stored
    assert b"No, 42." in stored  # (the other traces' text is there)


def _episode():
    model = Turn("g1", "tic_tac_toe", 0, 0, "player_0", "tiny", "Board: ...\nYour move?",
                 prompt_ids=tuple(range(12)), completion_ids=(5, 6, 7), reply="I play x(1,1)",
                 action="x(1,1)")
    bot = Turn("g1", "tic_tac_toe", 1, 1, "player_1", "bot:random", "Board: x..", action="o(0,0)")
    bad = Turn("g1", "tic_tac_toe", 2, 0, "player_0", "tiny", "Board: xo.", prompt_ids=(1, 2),
               completion_ids=(3,), reply="hmm", valid=False, error="parsing_failure",
               error_detail="no move", gate_reason="depends_on_invalid_step")
    info = json.dumps({"arena": {"agents": ["tiny", "bot:random"], "result": ["loss", "win"],
                                 "cause": ["own_error", "opponent_error"],
                                 "decided_by": "rule_error", "teams": [0, 1]}})
    return Episode("g1", "tic_tac_toe", 3, ("tiny", "bot:random"), (-1.0, 1.0),
                   ("invalid", "other_invalid"), 0, "parsing_failure", info, (model, bot, bad))


def test_every_game_is_a_trace_with_a_span_per_move(store):
    uri, client, exp, run = store
    assert len(log_game_traces(uri, exp, run, [_episode()])) == 1
    [game] = client.search_traces(locations=[exp], run_id=run)
    assert game.info.tags["mars.kind"] == "arena" and game.info.tags["mars.game"] == "tic_tac_toe"
    assert game.info.tags["mars.decided_by"] == "rule_error"
    spans = sorted(game.data.spans, key=lambda s: (s.parent_id is not None, s.start_time_ns))
    root, moves = spans[0], spans[1:]
    assert len(moves) == 3 and root.outputs["decided_by"] == "rule_error"
    assert root.inputs["players"] == ["tiny (seat 0)", "bot:random (seat 1)"]
    assert root.outputs["outcomes"] == {"0:tiny": "invalid", "1:bot:random": "other_invalid"}
    first, bot, bad = moves
    assert first.inputs == {"observation": "Board: ...\nYour move?"}
    assert first.outputs == {"reply": "I play x(1,1)", "action": "x(1,1)"}
    assert (first.attributes["mars.prompt_tokens"], first.attributes["mars.completion_tokens"]) \
        == (12, 3)
    assert first.attributes["mars.seat"] == 0 and first.span_type == "CHAT_MODEL"
    assert bot.span_type == "TOOL" and bot.attributes["mars.agent"] == "bot:random"
    assert bad.attributes["mars.valid"] is False
    assert bad.attributes["mars.gate_reason"] == "depends_on_invalid_step"
    assert bad.status.status_code == "ERROR" and bad.attributes["mars.outcome"] == "invalid"


def test_a_tracing_failure_is_a_warning(store, caplog):
    uri, client, exp, run = store
    with caplog.at_level(logging.WARNING, logger="tasks.traces"):
        assert log_game_traces(uri, "987654", run, [_episode()]) == []
        assert log_conversation_traces(uri, exp, run, "/no/such/records", "tiny") == []
    assert caplog.text.count("MLflow traces of") == 1  # an empty folder is no failure
    assert "MLflow traces of games not written" in caplog.text
