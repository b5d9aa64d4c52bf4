"""Resuming an interrupted reasoning evaluation (`eval.journal`): a suite killed part-way and
rerun gives the same answers as one that ran through, asks the model only what the journal
lacks, with the same seeds; a journal for other settings is set aside; a cut last line and
gated questions are asked again; finished journals are removed, and nothing else with them."""
from __future__ import annotations

import dataclasses
import json

import pytest

from eval.benchmarks import Question
from eval.mas import remove_journal, run_suite
from mars_core.engines.chat import ChatParams, ChatReply

QUESTIONS = [Question("gsm8k", f"q{n}", f"What is {n} + {n}?", str(2 * n)) for n in range(1, 7)]
GATED = Question("gpqa_diamond", "g1", "Secret gated question text", "A", ("x", "y"),
                 gated=True)
PARAMS = ChatParams(max_new_tokens=32, seed=3)
SYSTEMS = ["single", "mad", "autogen"]


class Seeded:
    """A chat engine whose reply is a function of the agent and the call's seed only (as a
    reproducible sampler's is), so runs can be compared; it stops working ("the kill") after
    `dies_after` calls, and records every conversation's seed it was sent."""

    def __init__(self, dies_after: int | None = None):
        self.dies_after = dies_after
        self.calls = 0
        self.seeds: list[int] = []

    def chat(self, conversations, params):
        if self.dies_after is not None and self.calls >= self.dies_after:
            raise KeyboardInterrupt("killed")
        self.calls += 1
        self.seeds += params.seeds
        out = []
        for convo, seed in zip(conversations, params.seeds):
            system = convo[0]["content"] if convo[0]["role"] == "system" else ""
            if "moderator" in system:
                text = ('{"preference": "yes", "supported_side": "affirmative", "answer": "4"}'
                        if seed % 3 == 0 else '{"preference": "no"}')
            elif "checking an assistant" in system:
                text = "TERMINATE" if seed % 2 else "Check the sum again."
            else:
                text = f"The sum is \\boxed{{{seed % 5}}}"
            out.append(ChatReply(text, 10, 5))
        return out


def answers(results):
    return [(r.system, r.id, r.prediction, r.stop, r.rounds, r.calls, r.correct,
             [(t["agent"], t["reply"]) for t in r.transcript]) for r in results]


def test_a_killed_suite_resumes_with_the_same_answers_and_asks_only_what_is_missing(tmp_path):
    through = Seeded()
    expected = run_suite(through, SYSTEMS, QUESTIONS, PARAMS, max_batch=4)
    journal = tmp_path / "journal"
    killed = Seeded(dies_after=5)  # single's 2 batches, then 3 of mad's
    with pytest.raises(KeyboardInterrupt):
        run_suite(killed, SYSTEMS, QUESTIONS, PARAMS, max_batch=4, journal=journal, model="m")
    lines = (journal / "mad.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["fingerprint"] and len(lines) > 1  # mad's replies so far
    resumed, notes = Seeded(), []
    got = run_suite(resumed, SYSTEMS, QUESTIONS, PARAMS, max_batch=4, progress=notes.append,
                    journal=journal, model="m")
    assert answers(got) == answers(expected)
    # every call was asked exactly once over the two runs, with the seed it has uninterrupted
    assert sorted(killed.seeds + resumed.seeds) == sorted(through.seeds)
    assert len(resumed.seeds) < len(through.seeds) - 6
    assert any("mad: resuming from" in n for n in notes)
    # a run whose journal is complete asks nothing
    again = Seeded()
    assert answers(run_suite(again, SYSTEMS, QUESTIONS, PARAMS, journal=journal, model="m")) \
        == answers(expected) and again.calls == 0


@pytest.mark.parametrize("change", [{"model": "other"}, {"params": dataclasses.replace(
    PARAMS, seed=4)}, {"questions": QUESTIONS[:5]}])
def test_a_journal_for_other_settings_is_set_aside(tmp_path, change, capsys):
    run_suite(Seeded(), ["single"], QUESTIONS, PARAMS, journal=tmp_path, model="m")
    args = {"model": "m", "params": PARAMS, "questions": QUESTIONS} | change
    engine = Seeded()
    run_suite(engine, ["single"], args["questions"], args["params"], journal=tmp_path,
              model=args["model"])
    assert engine.seeds and len(engine.seeds) == len(args["questions"])  # all asked again
    assert (tmp_path / "single.jsonl.other").exists()
    assert "written for other settings" in capsys.readouterr().out


def test_a_model_folder_changed_in_place_does_not_replay(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"1")
    run_suite(Seeded(), ["single"], QUESTIONS, PARAMS, journal=tmp_path / "j", model=str(model))
    (model / "weights.bin").write_bytes(b"22")  # retrained at the same path
    engine = Seeded()
    run_suite(engine, ["single"], QUESTIONS, PARAMS, journal=tmp_path / "j", model=str(model))
    assert len(engine.seeds) == len(QUESTIONS)


def test_a_cut_last_line_and_gated_questions_are_asked_again(tmp_path):
    questions = QUESTIONS[:3] + [GATED]
    run_suite(Seeded(), ["single"], questions, PARAMS, journal=tmp_path, model="m")
    path = tmp_path / "single.jsonl"
    text = path.read_text()
    assert "Secret gated" not in text and len(text.splitlines()) == 1 + 3  # header + 3 open
    path.write_text(text[:-20])  # the kill cut the last reply short
    engine = Seeded()
    got = run_suite(engine, ["single"], questions, PARAMS, journal=tmp_path, model="m")
    assert len(engine.seeds) == 2 and [r.calls for r in got] == [1, 1, 1, 1]
    assert len(path.read_text().splitlines()) == 1 + 3  # the cut line rewritten whole


def test_remove_journal_deletes_only_journals(tmp_path):
    for label in ("model", "baseline"):
        run_suite(Seeded(), ["single"], QUESTIONS, PARAMS, journal=tmp_path / label / "q0-6",
                  model="m")
    (tmp_path / "model" / "q0-6" / "single.jsonl").rename(
        tmp_path / "model" / "q0-6" / "single.jsonl.other")  # one set aside
    mine = tmp_path / "baseline" / "notes.jsonl"  # not a journal: no journal header
    mine.write_text('{"a": 1}\n')
    remove_journal(tmp_path)
    assert mine.exists() and sorted(p.relative_to(tmp_path).as_posix()
                                    for p in tmp_path.rglob("*")) == ["baseline",
                                                                      "baseline/notes.jsonl"]
    mine.unlink()
    remove_journal(tmp_path)
    assert not tmp_path.exists()
    remove_journal(tmp_path / "absent")  # nothing there: nothing to do
