"""`mars eval mas` through Prefect and MLflow: every system on every shipped benchmark with the
embedded model (a few short replies each; two benchmarks in `make test`), the comparison table
against a baseline, transcripts as artifacts, and gated GPQA questions kept out of every file."""
from __future__ import annotations

import csv
import json

import pytest
from mlflow import MlflowClient

from cli.main import main
from eval.benchmarks import SHIPPED
from tests.conftest import FULL

SYSTEM_CALLS = {"single": (1, 1), "mad": (3, 10), "autogen": (1, 5)}
# every shipped benchmark in `make test-full`; two in `make test` (the others' readers and
# graders have their unit tests)
BENCHMARKS = tuple(SHIPPED) if FULL else ("gsm8k", "aqua")


@pytest.mark.full  # `make test`: the systems through the CLI on GPQA and lm-eval below
@pytest.mark.benchmarks()
def test_every_system_on_every_benchmark_with_the_embedded_model(
        tmp_path, prefect_api, embedded_dir, tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setenv("MARS_CACHE_DIR", str(embedded_dir.parent))  # "embedded" = that folder
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "mas.json"
    rc = main(["eval", "mas", "--model", "embedded", "--baseline", str(tiny_model_dir),
               "--limit", "1", "--max-tokens", "24", "--benchmarks", ",".join(BENCHMARKS),
               "--out", str(out), "--tracking-uri", uri])
    cap = capsys.readouterr()
    assert rc == 0, cap.err[-3000:]
    assert f"mars: done: {2 * len(SYSTEM_CALLS) * len(BENCHMARKS)} answers" in cap.out
    result = json.loads(out.read_text())
    assert result["config"]["temperature"] == 0.6 and result["config"]["top_k"] == 20
    for label in ("model", "baseline"):
        rows = result["models"][label]["rows"]
        assert {(r["system"], r["benchmark"]) for r in rows} == {
            (s, b) for s in SYSTEM_CALLS for b in BENCHMARKS}
        for r in rows:
            lo, hi = SYSTEM_CALLS[r["system"]]
            assert r["n"] == 1 and lo <= r["calls"] <= hi, r
            assert r["completion_tokens"] > 0 and r["ci_low"] <= r["accuracy"] <= r["ci_high"]
            assert sum(r["stops"].values()) == 1
    table = result["table"]
    assert [(t["model"], t["system"]) for t in table][:3] == [
        ("model", "single"), ("baseline", "single"), ("model - baseline", "single")]
    assert set(BENCHMARKS) | {"avg"} <= set(table[0])
    # a transcript per question: who spoke, in order
    mad = json.loads((tmp_path / "mas_transcripts/model/mad/gsm8k.jsonl").read_text())
    agents = [t["agent"] for t in mad["transcript"]]
    assert agents[:3] == ["affirmative", "negative", "moderator"] and mad["calls"] == len(agents)
    assert "| model - baseline | mad |" in (tmp_path / "mas_table.md").read_text()
    paired = (tmp_path / "mas_paired.md").read_text()  # per cell, paired by question
    assert "| model - baseline (points, paired) |" in paired and "| single | gsm8k | 1 | " in paired
    assert f"| all | all | {len(SYSTEM_CALLS) * len(BENCHMARKS)} | " in paired  # 1 question each
    assert not (tmp_path / "mas_journal").exists()  # the resume journal goes once written

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("mars-mas-eval").experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = {r.info.run_name.rsplit(" / ", 1)[1]: r for r in runs
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == {"model", "baseline"}
    assert {"comparison_table.json", "mas.json", "mas_table.md", "mas_paired.md"} <= {
        a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "avg/model/mad" in parent.data.metrics
    child = children["model"]
    assert {f"accuracy/{s}/{b}" for s in SYSTEM_CALLS for b in BENCHMARKS} <= set(
        child.data.metrics)
    assert child.data.metrics["calls/single/gsm8k"] == 1
    logged = {a.path for a in client.list_artifacts(child.info.run_id, "transcripts/autogen")}
    assert "transcripts/autogen/aqua.jsonl" in logged
    # every conversation is an MLflow trace of its model's run, with a span per model call
    exp = parent.info.experiment_id
    for run in children.values():
        traces = client.search_traces(locations=[exp], run_id=run.info.run_id, max_results=100)
        assert len(traces) == len(SYSTEM_CALLS) * len(BENCHMARKS)
        for t in traces:
            root = next(s for s in t.data.spans if s.parent_id is None)
            assert len(t.data.spans) == 1 + root.attributes["mars.calls"]
            assert t.info.trace_metadata["mlflow.sourceRun"] == run.info.run_id
    traces = {t.info.tags["mlflow.traceName"]: t for t in client.search_traces(
        locations=[exp], run_id=child.info.run_id, max_results=100)}
    trace = traces[f"mad gsm8k {mad['id']}"]
    turns = sorted((s for s in trace.data.spans if s.parent_id), key=lambda s: s.start_time_ns)
    assert [s.attributes["mars.agent"] for s in turns] == agents
    assert [s.outputs for s in turns] == [t["reply"] for t in mad["transcript"]]
    assert trace.info.assessments[0].value == mad["correct"]
    assert trace.info.tags["mars.correct"] == str(mad["correct"]).lower()
    for t in traces.values():  # one call: the conversation's tokens and grade are the call's
        if t.info.tags["mars.system"] == "single":
            [call] = [s for s in t.data.spans if s.parent_id]
            assert call.attributes["mars.completion_tokens"] > 0
            assert call.attributes["mars.verdict"] in ("correct", "wrong")


def test_gpqa_is_read_from_the_user_path_and_never_written(tmp_path, prefect_api,
                                                           tiny_model_dir, capsys):
    secret = "Which made-up particle decays into {}?"
    gpqa = tmp_path / "private" / "gpqa_diamond.csv"
    gpqa.parent.mkdir()
    with open(gpqa, "w", newline="") as f:
        w = csv.DictWriter(f, ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1",
                               "Incorrect Answer 2", "Incorrect Answer 3"])
        w.writeheader()
        for i in range(2):
            w.writerow({"Record ID": f"r{i}", "Question": secret.format(i),
                        "Correct Answer": "quarkonium-x", "Incorrect Answer 1": "a",
                        "Incorrect Answer 2": "b", "Incorrect Answer 3": "c"})
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rc = main(["eval", "mas", "--model", str(tiny_model_dir), "--systems", "single,mad",
               "--benchmarks", "gpqa_diamond", "--gpqa-path", str(gpqa), "--max-tokens", "8",
               "--out", str(out_dir / "gpqa.json"), "--tracking-uri", uri])
    assert rc == 0, capsys.readouterr().err[-3000:]
    rows = json.loads((out_dir / "gpqa.json").read_text())["models"]["model"]["rows"]
    assert {(r["system"], r["n"]) for r in rows} == {("single", 2), ("mad", 2)}
    written = [p for p in [*out_dir.rglob("*"), *tmp_path.glob("mlartifacts/**/*")] if p.is_file()]
    assert any(p.name == "gpqa_diamond.jsonl" for p in written)
    for p in written:
        text = p.read_text(errors="ignore")
        assert "made-up particle" not in text and "quarkonium" not in text, p
    # the conversations are traced (ids, grades, counts), their text withheld everywhere
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("mars-mas-eval").experiment_id
    traces = client.search_traces(locations=[exp], max_results=100)
    assert len(traces) == 4 and {t.info.tags["mars.benchmark"] for t in traces} == {"gpqa_diamond"}
    mad = next(t for t in traces if t.info.tags["mars.system"] == "mad")
    assert len(mad.data.spans) >= 4 and all("quarkonium" not in t.to_json() for t in traces)
    turn = next(s for s in mad.data.spans if s.parent_id)  # per-turn tokens, no text
    assert turn.attributes["mars.completion_tokens"] <= 8
    stored = (tmp_path / "mlflow.db").read_bytes()
    assert b"made-up particle" not in stored and b"quarkonium" not in stored
    # the questions answered are the model run's dataset input, traced to the user's file
    child, = client.search_runs([exp], "tags.`mars.model` != ''")
    inputs = child.inputs.dataset_inputs
    assert [(d.dataset.name, json.loads(d.dataset.profile)["num_rows"]) for d in inputs] == [
        ("gpqa_diamond", 2)]
    assert str(gpqa) in inputs[0].dataset.source


def test_bad_flags_are_one_line_errors(tmp_path, prefect_api, capsys):
    for args, message in [
        (["--benchmarks", "gsm8k,nope"], "unknown benchmark 'nope'"),
        (["--systems", "single,chorus"], "unknown system 'chorus'"),
        (["--benchmarks", "gpqa_diamond"], "gpqa_diamond is gated"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--data-dir", str(tmp_path / "none")], "benchmark folder not found"),
        (["--baseline", "models:/x"], "--baseline: bad model URI"),
        (["--out", str(tmp_path / "no" / "x.json")], "--out folder does not exist"),
    ]:
        # a benchmark folder (empty: no file is read before these refusals); the case that
        # names a missing one gives its own --data-dir last, which argparse keeps
        assert main(["eval", "mas", "--model", "embedded", "--data-dir", str(tmp_path),
                     *args]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.benchmarks("gsm8k", "aqua")
def test_lm_eval_harness_through_the_cli(tmp_path, prefect_api, tiny_model_dir, capsys):
    import pytest

    pytest.importorskip("lm_eval")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "harness.json"
    rc = main(["eval", "harness", "--model", str(tiny_model_dir), "--benchmarks", "gsm8k,aqua",
               "--limit", "2", "--max-tokens", "8", "--out", str(out), "--tracking-uri", uri])
    cap = capsys.readouterr()
    assert rc == 0, cap.err[-3000:]
    assert "mars: done: 4 answers" in cap.out
    result = json.loads(out.read_text())
    assert {b: r["n"] for b, r in result["benchmarks"].items()} == {"gsm8k": 2, "aqua": 2}
    client = MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("mars-mas-eval").experiment_id])
    assert {"harness/gsm8k/accuracy", "harness/aqua/stderr"} <= set(run.data.metrics)
