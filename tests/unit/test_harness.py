"""lm-evaluation-harness glue: our benchmark files become loadable lm-eval tasks graded by our
own grader, and a real offline run with the embedded model returns honest per-benchmark
numbers, leaving no gated GPQA text on disk or in the result."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from eval import harness  # noqa: E402
from eval.benchmarks import SHIPPED, load, task_prompt  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SECRET = "Which zorblax isotope is the most stable under quuxian pressure"


def _manager(folder: Path):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(folder), include_defaults=False)


@pytest.fixture
def gpqa_csv(tmp_path) -> Path:
    """A made-up file with GPQA's columns (the real one is gated and never shipped)."""
    path = tmp_path / "user" / "gpqa_diamond.csv"
    path.parent.mkdir()
    fields = ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1",
              "Incorrect Answer 2", "Incorrect Answer 3"]
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for i in range(2):
            writer.writerow({"Record ID": f"rec{i}", "Question": f"{SECRET} #{i}?",
                             "Correct Answer": "Zorb-7", "Incorrect Answer 1": "Zorb-3",
                             "Incorrect Answer 2": "Zorb-9", "Incorrect Answer 3": "Zorb-1"})
    return path


@pytest.mark.benchmarks()
def test_written_tasks_load_in_lm_eval_with_our_prompts_and_sampling(tmp_path):
    names = harness.write_tasks(list(SHIPPED), tmp_path / "tasks", limit=3, max_new_tokens=77)
    assert names == [f"mars_{n}" for n in SHIPPED]
    loaded = _manager(tmp_path / "tasks").load(["mars_gsm8k", "mars_aqua", "mars_mmlu_stem"])
    assert set(loaded["tasks"]) == {"mars_gsm8k", "mars_aqua", "mars_mmlu_stem"}
    for bench in ("gsm8k", "aqua", "mmlu_stem"):
        task = loaded["tasks"][f"mars_{bench}"]
        docs = list(task.test_docs())
        expected = load(bench, limit=3)  # the same evenly spread questions as `mars eval mas`
        assert [d["id"] for d in docs] == [q.id for q in expected]
        assert [task.doc_to_text(d) for d in docs] == [task_prompt(q) for q in expected]
        assert [d["reference"] for d in docs] == [q.reference for q in expected]
        gen = task.config.generation_kwargs
        assert gen["max_gen_toks"] == 77 and gen["until"] == [] and gen["do_sample"] is True
        assert (gen["temperature"], gen["top_p"], gen["top_k"]) == (0.6, 0.95, 20)
        assert task.config.output_type == "generate_until"


@pytest.mark.benchmarks("gsm8k", "aqua")
def test_process_results_grades_with_our_grader(tmp_path):
    harness.write_tasks(["gsm8k", "aqua"], tmp_path, limit=1)
    tasks = _manager(tmp_path).load(["mars_gsm8k", "mars_aqua"])["tasks"]
    math_doc = next(iter(tasks["mars_gsm8k"].test_docs()))
    ref = math_doc["reference"]
    math_task = tasks["mars_gsm8k"]
    assert math_task.process_results(math_doc, [f"So it is \\boxed{{{ref}}}."]) == {"acc": 1}
    assert math_task.process_results(math_doc, [f"\\boxed{{{ref}1}}"]) == {"acc": 0}
    assert math_task.process_results(math_doc, [""]) == {"acc": 0}
    choice_doc = next(iter(tasks["mars_aqua"].test_docs()))
    right = choice_doc["reference"]
    wrong = "A" if right != "A" else "B"
    choice_task = tasks["mars_aqua"]
    assert choice_task.process_results(choice_doc, [f"The answer is \\boxed{{{right}}}"]) == \
        {"acc": 1}
    assert choice_task.process_results(choice_doc, [f"The answer is \\boxed{{{wrong}}}"]) == \
        {"acc": 0}
    # an unclosed reasoning block never answered
    assert choice_task.process_results(choice_doc, [f"<think>\\boxed{{{right}}}"]) == {"acc": 0}


@pytest.mark.benchmarks("gsm8k", "aqua")
def test_run_harness_with_the_embedded_model(embedded_dir):
    out = harness.run_harness(["gsm8k", "aqua"], model_dir=embedded_dir, limit=2, max_new_tokens=32,
                              batch_size=4)
    assert set(out["benchmarks"]) == {"gsm8k", "aqua"}
    for row in out["benchmarks"].values():
        assert row["n"] == 2
        assert 0.0 <= row["accuracy"] <= 1.0 and row["accuracy"] * 2 in (0.0, 1.0, 2.0)
        assert row["stderr"] >= 0.0
    assert out["lm_eval_version"] == "0.4.13"
    assert out["config"]["model"] == "hf" and out["config"]["device"] == "cpu"
    assert out["config"]["tasks"] == ["mars_gsm8k", "mars_aqua"]
    json.dumps(out)  # plain data, ready for an artifact


def test_gpqa_runs_and_leaves_nothing_behind(embedded_dir, gpqa_csv, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    out = harness.run_harness(["gpqa_diamond"], model_dir=embedded_dir, gpqa_path=gpqa_csv,
                              limit=1, max_new_tokens=4)
    assert out["benchmarks"]["gpqa_diamond"]["n"] == 1
    assert SECRET not in json.dumps(out)
    assert not list(scratch.glob("mars-harness-*"))  # the task folder is gone
    for path in scratch.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("kwargs, message", [
    ({"benchmarks": ["gsm9k"], "model_dir": "x"}, "unknown benchmark 'gsm9k'"),
    ({"benchmarks": ["gpqa_diamond"], "model_dir": "x"}, "gpqa_diamond is gated"),
    ({"benchmarks": ["gsm8k"]}, "exactly one of model_dir"),
    ({"benchmarks": ["gsm8k"], "model_dir": "x", "base_url": "http://h:1"},
     "exactly one of model_dir"),
    ({"benchmarks": ["gsm8k"], "model_dir": "/nowhere/model"}, "model folder not found"),
    ({"benchmarks": ["gsm8k"], "model_dir": "x", "batch_size": 0}, "batch_size must be"),
])
def test_bad_input_is_a_one_line_value_error(kwargs, message, monkeypatch):
    monkeypatch.delenv("MARS_GPQA_PATH", raising=False)
    args = dict(kwargs)
    with pytest.raises(ValueError, match=message) as err:
        harness.run_harness(args.pop("benchmarks"), **args)
    assert "\n" not in str(err.value)


def test_missing_data_folder_and_bad_limits(tmp_path):
    with pytest.raises(ValueError, match="benchmark folder not found"):
        harness.write_tasks(["gsm8k"], tmp_path, data_dir=tmp_path / "missing")
    with pytest.raises(ValueError, match="max_new_tokens must be"):
        harness.write_tasks(["gsm8k"], tmp_path, max_new_tokens=0)
    with pytest.raises(ValueError, match="no benchmarks"):
        harness.write_tasks([], tmp_path)


def test_without_lm_eval_import_works_and_run_says_how_to_install(embedded_dir, monkeypatch):
    code = ("import sys; sys.modules['lm_eval'] = None\n"
            "import eval.harness as h\n"
            "try:\n    h.run_harness(['gsm8k'], model_dir=sys.argv[1])\n"
            "except ValueError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code, str(embedded_dir)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "lm-eval is not installed: pip install -e '.[eval]'"


def test_a_server_run_without_the_api_client_packages_says_so(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tenacity" else real(name, *a))
    with pytest.raises(ValueError, match=r"needs tenacity: pip install -e '\.\[eval\]'"):
        harness.run_harness(["gsm8k"], base_url="http://127.0.0.1:9", served_model="policy")


def test_server_urls_are_normalised():
    for url in ("http://h:8000", "http://h:8000/", "http://h:8000/v1",
                "http://h:8000/v1/chat/completions"):
        assert harness.chat_url(url) == "http://h:8000/v1/chat/completions"
    with pytest.raises(ValueError, match="cannot list the served models"):
        harness.served_name("http://127.0.0.1:9", timeout=2)
