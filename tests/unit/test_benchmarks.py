"""Benchmark loaders: every shipped file into one question format; GPQA only from a user path;
the publishers' datasets (hf://) into the same questions as the files."""
from __future__ import annotations

import csv
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from eval.benchmarks import (BENCHMARKS, ENV_DIR, HUB, MMLU_STEM_SUBJECTS, PUBLISHERS, SHIPPED,
                                  BenchmarkError, check_names, data_dir, load, spread,
                                  task_prompt)
from tests.benchmark_files import benchmark_folder

SIZES = {"math500": 500, "gsm8k": 1319, "aqua": 254, "aime24": 30, "amc23": 40,
         "mmlu_stem": 3018}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.benchmarks(n))
                                  for n in SHIPPED])
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


@pytest.mark.benchmarks("gsm8k", "amc23", "math500", "aqua", "mmlu_stem")
def test_references_are_read_as_their_publishers_mean_them():
    assert load("gsm8k")[0].reference == "18"  # the number after ####
    assert load("amc23")[0].reference == "27"  # 27.0
    assert load("math500")[0].reference == "\\left( 3, \\frac{\\pi}{2} \\right)"  # comma kept
    aqua = load("aqua")[0]
    assert aqua.reference == "A" and aqua.choices[0].startswith("5(")  # "A)" prefix dropped
    mmlu = load("mmlu_stem")[0]
    assert mmlu.reference == "C" and len(mmlu.choices) == 4  # index 2


@pytest.mark.benchmarks("mmlu_stem")
def test_limit_spreads_evenly_and_is_stable():
    qs = load("mmlu_stem", limit=10)
    assert len(qs) == 10 and qs == load("mmlu_stem", limit=10)
    assert len({q.id.rsplit("-", 1)[0] for q in qs}) > 3  # several subjects, not the first only
    assert spread([1, 2, 3], 5) == [1, 2, 3]
    with pytest.raises(BenchmarkError, match="at least 1"):
        spread([1, 2], 0)


@pytest.mark.benchmarks("gsm8k", "aqua")
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


# ---- the publishers' datasets (hf://) ------------------------------------------------------
# No hub here: the shipped files are rewritten in their publishers' hub layout (repository
# folders, README configs, parquet/JSONL/CSV files, the publishers' column names) and read
# through the same `datasets.load_dataset(id, config, split=...)` call, via `hf://MIRROR`.

def _readme(folder, configs: dict[str, dict[str, str]]):
    """A dataset card whose YAML names each config's files per split, as hub repos have."""
    lines = ["---", "configs:"]
    for name, splits in configs.items():
        lines += [f"- config_name: {name}", "  data_files:"]
        lines += [f"  - split: {split}\n    path: {path}" for split, path in splits.items()]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text("\n".join(lines + ["---", ""]))


def _parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _shipped(name):
    """The rows of a shipped file, from where `load` reads them (`benchmark_folder`)."""
    with open(benchmark_folder() / f"{name}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _without(rows, *keys):
    return [{k: v for k, v in r.items() if k not in keys} for r in rows]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """`hf://<root>`: the shipped rows as the publishers' repositories hold them, plus rows the
    shipped subset leaves out (other years, other configs), in a private datasets cache."""
    import datasets

    root = tmp_path_factory.mktemp("hub-mirror")
    gsm = root / PUBLISHERS["gsm8k"].id
    _readme(gsm, {"main": {"test": "main/test-*"}, "socratic": {"test": "socratic/test-*"}})
    _parquet(gsm / "main/test-00000-of-00001.parquet", _without(_shipped("gsm8k"), "idx"))
    _parquet(gsm / "socratic/test-00000-of-00001.parquet",
             [{"question": "not this config", "answer": "#### 1"}])
    math = root / PUBLISHERS["math500"].id  # one test.jsonl, no configs: split from its name
    math.mkdir(parents=True)
    with open(math / "test.jsonl", "w", encoding="utf-8") as f:
        for n, row in enumerate(_shipped("math500")):
            f.write(json.dumps({**row, "unique_id": f"test/{row['subject']}/{n}.json"}) + "\n")
    aime = root / PUBLISHERS["aime24"].id
    _readme(aime, {"default": {"train": "data/train-*"}})
    _parquet(aime / "data/train-00000-of-00001.parquet",
             [{**r, "year": "2024"} for r in _without(_shipped("aime24"), "question")])
    amc = root / PUBLISHERS["amc23"].id  # 2023 and 2022 problems; the benchmark is 2023's
    _readme(amc, {"default": {"train": "data/train-*"}})
    rows = _without(_shipped("amc23"), "question")
    rows[3:3] = [{"id": 100, "problem": "a 2022 problem", "answer": 5.0,
                  "url": "https://artofproblemsolving.com/wiki/index.php/2022_AMC_12A_Problems"}]
    _parquet(amc / "data/train-00000-of-00001.parquet", rows)
    aqua = root / PUBLISHERS["aqua"].id
    _readme(aqua, {"raw": {"test": "raw/test-*", "train": "raw/train-*"}})
    _parquet(aqua / "raw/test-00000-of-00001.parquet", _shipped("aqua"))
    _parquet(aqua / "raw/train-00000-of-00001.parquet", _shipped("aqua")[:2])
    mmlu = root / PUBLISHERS["mmlu_stem"].id  # one config per subject, `subject` not `type`
    rows = _shipped("mmlu_stem")
    subjects = list(dict.fromkeys(r["type"] for r in rows))
    _readme(mmlu, {s: {"test": f"{s}/test-*", "dev": f"{s}/dev-*"} for s in subjects})
    for s in subjects:
        mine = [{"question": r["question"], "subject": s, "choices": r["choices"],
                 "answer": r["answer"]} for r in rows if r["type"] == s]
        _parquet(mmlu / s / "test-00000-of-00001.parquet", mine)
        _parquet(mmlu / s / "dev-00000-of-00001.parquet", mine[:1])
    gpqa = root / PUBLISHERS["gpqa_diamond"].id
    _readme(gpqa, {"gpqa_diamond": {"train": "gpqa_diamond.csv"},
                   "gpqa_main": {"train": "gpqa_main.csv"}})
    _gpqa_csv(gpqa / "gpqa_diamond.csv")
    _gpqa_csv(gpqa / "gpqa_main.csv", 5)
    with pytest.MonkeyPatch.context() as mp:  # Arrow files of this test go to a temp folder
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", root.parent / "hf-datasets-cache")
        yield root


@pytest.mark.benchmarks("mmlu_stem")
def test_every_benchmark_has_a_publisher():
    assert set(PUBLISHERS) == set(BENCHMARKS)
    assert all(PUBLISHERS[n].id.count("/") == 1 for n in BENCHMARKS)
    # the hub configs are read in the shipped file's subject order, so ids and --limit agree
    assert MMLU_STEM_SUBJECTS == tuple(dict.fromkeys(r["type"] for r in _shipped("mmlu_stem")))


@pytest.mark.benchmarks()  # the mirror holds every shipped file
@pytest.mark.parametrize("name", SHIPPED)
def test_publisher_rows_give_the_file_loaders_questions(name, mirror):
    hub = load(name, f"{HUB}{mirror}")
    files = load(name)
    assert load(name, f"{HUB}{mirror}", limit=7) == spread(hub, 7)  # --limit: the same picks
    if name == "math500":  # the publisher's own ids (`unique_id`); the shipped file has none
        assert [q.id for q in hub] == [f"test/{r['subject']}/{n}.json"
                                       for n, r in enumerate(_shipped("math500"))]
        hub = [replace(q, id=f.id) for q, f in zip(hub, files)]
    assert hub == files


@pytest.mark.benchmarks()
def test_gpqa_from_the_hub_layout_is_its_csv(mirror, tmp_path):
    _gpqa_csv(tmp_path / "gpqa.csv")
    hub = load("gpqa_diamond", gpqa_path=f"{HUB}{mirror}")
    assert hub == load("gpqa_diamond", gpqa_path=tmp_path / "gpqa.csv")
    assert len(hub) == 3 and all(q.gated for q in hub)  # the diamond config, not gpqa_main


def test_hub_offline_is_refused_up_front_in_one_line(monkeypatch):
    for key, value in (("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "true")):
        for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setenv(key, value)
        with pytest.raises(BenchmarkError) as err:
            load("gsm8k", HUB)
        message = str(err.value)
        assert "\n" not in message and "offline" in message and key in message
        assert "openai/gsm8k" in message and "--data-dir DIR" in message
    with pytest.raises(BenchmarkError, match="offline.*--gpqa-path FILE"):
        load("gpqa_diamond", gpqa_path=HUB)
    monkeypatch.setenv(ENV_DIR, HUB)  # the environment can name the hub too
    with pytest.raises(BenchmarkError, match="offline"):
        load("aqua")


def test_unreachable_hub_is_one_line_and_quick(tmp_path):
    """A hub that refuses connections: one request, no retries, one line, no traceback."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections to it are refused
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE",
                                                            "HF_DATASETS_OFFLINE")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(tmp_path / "hf"),
               NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    code = ("from eval.benchmarks import load, BenchmarkError\n"
            "try:\n    load('math500', 'hf://')\n"
            "except BenchmarkError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stdout.startswith("math500: the Hugging Face hub is unreachable")
    assert "HuggingFaceH4/MATH-500" in out.stdout and "--data-dir DIR" in out.stdout


@pytest.mark.benchmarks()
def test_hub_sources_are_checked_in_one_line(mirror, tmp_path, monkeypatch):
    assert data_dir(f"{HUB}{mirror}") == f"{HUB}{mirror}"
    with pytest.raises(BenchmarkError, match="hub is offline here.*--data-dir DIR"):
        data_dir(HUB)  # what `mars eval` checks before a flow starts (tests run offline)
    with pytest.raises(BenchmarkError, match="hub mirror folder not found"):
        data_dir(f"{HUB}{tmp_path / 'missing'}")
    with pytest.raises(BenchmarkError, match="no copy of openai/gsm8k in the hub mirror"):
        load("gsm8k", f"{HUB}{tmp_path}")
    _readme(tmp_path / "openai/gsm8k", {"socratic": {"test": "socratic/test-*"}})
    _parquet(tmp_path / "openai/gsm8k/socratic/test-00000-of-00001.parquet",
             [{"question": "q", "answer": "#### 1"}])
    with pytest.raises(BenchmarkError) as err:  # the publisher's config is missing
        load("gsm8k", f"{HUB}{tmp_path}")
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("gsm8k: cannot load openai/gsm8k [main, test] from ")
    monkeypatch.delenv("MARS_GPQA_PATH", raising=False)
    with pytest.raises(BenchmarkError, match=r"--gpqa-path hf:// to read it from the hub"):
        check_names(["gpqa_diamond"])
