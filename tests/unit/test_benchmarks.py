"""Benchmark loaders: every shipped file into one question format; GPQA only from a user path."""
from __future__ import annotations

import csv
import json

import pytest

from eval.benchmarks import (ENV_DIR, SHIPPED, BenchmarkError, check_names, data_dir, load,
                             spread, task_prompt)

SIZES = {"math500": 500, "gsm8k": 1319, "aqua": 254, "aime24": 30, "amc23": 40,
         "mmlu_stem": 3018}


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_files_load_into_one_format(name):
    qs = load(name)
    assert len(qs) == SIZES[name]
    assert len({q.id for q in qs}) == len(qs)  # ids are unique
    assert all(q.prompt and q.reference and q.benchmark == name and not q.gated for q in qs)
    if name in ("aqua", "mmlu_stem"):
        assert all(q.kind == "choice" and q.reference in "ABCDE" for q in qs)
        assert all(f"{chr(65 + i)}) " in q.prompt for q in qs for i in range(len(q.choices)))
    else:
        assert all(q.kind == "math" and not q.choices for q in qs)


def test_references_are_read_as_their_publishers_mean_them():
    assert load("gsm8k")[0].reference == "18"  # the number after ####
    assert load("amc23")[0].reference == "27"  # 27.0
    assert load("math500")[0].reference == "\\left( 3, \\frac{\\pi}{2} \\right)"  # comma kept
    aqua = load("aqua")[0]
    assert aqua.reference == "A" and aqua.choices[0].startswith("5(")  # "A)" prefix dropped
    mmlu = load("mmlu_stem")[0]
    assert mmlu.reference == "C" and len(mmlu.choices) == 4  # index 2


def test_limit_spreads_evenly_and_is_stable():
    qs = load("mmlu_stem", limit=10)
    assert len(qs) == 10 and qs == load("mmlu_stem", limit=10)
    assert len({q.id.rsplit("-", 1)[0] for q in qs}) > 3  # several subjects, not the first only
    assert spread([1, 2, 3], 5) == [1, 2, 3]
    with pytest.raises(BenchmarkError, match="at least 1"):
        spread([1, 2], 0)


def test_task_prompt_asks_for_the_answer_format():
    assert "\\boxed{}" in task_prompt(load("gsm8k", limit=1)[0])
    assert "letter" in task_prompt(load("aqua", limit=1)[0])


def _gpqa_csv(path, n=3):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1",
                               "Incorrect Answer 2", "Incorrect Answer 3"])
        w.writeheader()
        for i in range(n):
            w.writerow({"Record ID": f"rec{i}", "Question": f"Made-up question {i}?",
                        "Correct Answer": f"right {i}", "Incorrect Answer 1": "w1",
                        "Incorrect Answer 2": "w2", "Incorrect Answer 3": "w3"})


def test_gpqa_only_from_a_user_path_and_marked_gated(tmp_path, monkeypatch):
    monkeypatch.delenv("MARS_GPQA_PATH", raising=False)
    with pytest.raises(BenchmarkError, match="gated"):
        load("gpqa_diamond")
    path = tmp_path / "gpqa_diamond.csv"
    _gpqa_csv(path)
    qs = load("gpqa_diamond", gpqa_path=path)
    assert len(qs) == 3 and all(q.gated and len(q.choices) == 4 for q in qs)
    for q in qs:  # the right option sits under the reference letter; the order is stable
        assert q.choices["ABCD".index(q.reference)].startswith("right")
    assert [q.reference for q in qs] == [q.reference for q in load("gpqa_diamond",
                                                                    gpqa_path=path)]


def test_bad_input_is_one_line(tmp_path, monkeypatch):
    with pytest.raises(BenchmarkError, match="unknown benchmark 'nope'"):
        check_names(["gsm8k", "nope"])
    with pytest.raises(BenchmarkError, match="benchmark folder not found"):
        data_dir(tmp_path / "missing")
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "q", "answer": "4"}\n')
    with pytest.raises(BenchmarkError, match="has no '####'"):
        load("gsm8k", tmp_path)
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "q", "answer": "#### 4"}\n{oops\n')
    with pytest.raises(BenchmarkError, match="line 2 is not JSON"):
        load("gsm8k", tmp_path)
    (tmp_path / "aqua.jsonl").write_text(json.dumps({"question": "q", "options": ["A)1", "B)2"],
                                                    "correct": "E"}) + "\n")
    with pytest.raises(BenchmarkError, match="outside its options"):
        load("aqua", tmp_path)
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    with pytest.raises(BenchmarkError, match="math500: file not found"):
        load("math500")
