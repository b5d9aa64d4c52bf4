"""A run that evaluates its start policy ends with the start and final policies' strength side
by side, paired on the same deals (tiny model)."""
from __future__ import annotations

import json

from mlflow import MlflowClient

from cli.main import main
from mars_core.run.layout import (FINAL, GENERATE_ROLLOUTS, STRENGTH, STRENGTH_JSON, TRAIN_STEP,
                                  iter_name, stage_dir)
from tests.conftest import REPO
from tests.flows.invariants import check_iteration

SMOKE = str(REPO / "configs/smoke.yaml")


def test_run_ends_with_start_and_final_strength(tmp_path, prefect_api, tiny_model_dir, caplog):
    rc = main(["train", "--config", SMOKE, "--runs-dir", str(tmp_path), "--run-name", "s",
               "--set", f"model.path={tiny_model_dir}", "--set", "model.max_context_tokens=1024",
               "--set", "run.iterations=1", "--set", "rollout.max_new_tokens=8",
               "--set", "warmup.steps=1", "--set", "warmup.probe_games=1",
               "--set", "evaluation.at_start=true", "--set", "evaluation.every=1",
               "--set", "evaluation.games_per_seat=3",
               "--set", "evaluation.opponents={tic_tac_toe: [bot:random, bot:mcts-5]}"])
    assert rc == 0
    run = tmp_path / "s"
    check_iteration(run, 0, episodes_per_iteration=4)
    rows = json.loads((stage_dir(run, FINAL, STRENGTH) / STRENGTH_JSON).read_text())
    assert {(r["policy"], r["opponent"]) for r in rows} == {
        (p, o) for p in ("start", "final") for o in ("bot:random", "bot:mcts-5")}
    for r in rows:
        assert r["n"] == r["paired_n"] == 6  # both seats, the same six deals in both
        assert 0 <= r["normalized_return"] <= 100 and r["ci95"] >= 0
    printed = caplog.text  # the flow prints (log_prints): the table ends the run's output
    assert "start policy vs final policy" in printed
    assert "| final | tic_tac_toe | bot:mcts-5 | 6 |" in printed
    # then in words: where the curve and the games are, what to run next (no exploitability:
    # Tic-Tac-Toe has none to read)
    picture = stage_dir(run, FINAL, STRENGTH) / "learning_curve.png"
    assert picture.read_bytes()[:4] == b"\x89PNG" and f"the curve: {picture}" in printed
    assert "the games, turn by turn:" in printed and "next: `make learn`" in printed
    assert "exploitability" not in printed.split("the curve:")[0].split("bot:mcts-5 | 6 |")[-1]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("mars-smoke")
    parent, = [r for r in client.search_runs([exp.experiment_id])
               if "mlflow.parentRunId" not in r.data.tags]
    metrics = parent.data.metrics  # MLflow names: `bot:random` is logged as `bot_random`
    assert {"strength/tic_tac_toe/bot_random/diff", "strength/tic_tac_toe/bot_mcts-5/final",
            "eval/tic_tac_toe/bot_random/seat0_normalized_return",
            "eval/tic_tac_toe/bot_mcts-5/seat1_normalized_return"} <= set(metrics)

    # Lineage: the code, the base model and the episodes behind every metric.
    assert parent.data.tags["mars.base_model"] == str(tiny_model_dir)
    assert len(parent.data.tags["mlflow.source.git.commit"]) == 40
    inputs = {(d.dataset.name, d.tags[0].value) for d in parent.inputs.dataset_inputs}
    strength_files = {a.path for a in client.list_artifacts(parent.info.run_id, STRENGTH)}
    assert f"{STRENGTH}/learning_curve.png" in strength_files
    assert inputs == {("s/iter_0000/episodes", GENERATE_ROLLOUTS),
                      ("s/iter_0000/turns", GENERATE_ROLLOUTS)}
    _check_prefect_artifacts(tmp_path, parent.info.run_id)


def _check_prefect_artifacts(runs_dir, mlflow_run_id):
    """The flow run shows its results: the evaluation tables, the learning curve, the summary
    with a link to the MLflow run, the iterations' progress; task runs name their iteration."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterFlowRunId,
                                                FlowRunFilter, FlowRunFilterId)

    async def read():
        async with get_client() as client:
            runs = [r for r in await client.read_flow_runs()
                    if r.parameters.get("runs_dir") == str(runs_dir)]
            arts = await client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[runs[-1].id])))
            tasks = await client.read_task_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[runs[-1].id])))
            return arts, tasks

    arts, tasks = asyncio.run(read())
    by_key = {}
    for a in arts:
        by_key.setdefault(a.key or a.type, []).append(a)
    assert len(by_key["s-evaluation"]) == 2  # before training and after iteration 1
    table = json.loads(by_key["s-evaluation"][0].data)
    assert {r["opponent"] for r in table} == {"bot:random", "bot:mcts-5"}
    assert all(0 <= r["normalized_return"] <= 100 for r in table)
    curve = json.loads(by_key["s-learning-curve"][0].data)
    assert [r["iterations"] for r in curve] == [0, 1]
    assert set(curve[0]) == {"iterations", "tic_tac_toe vs bot:random", "tic_tac_toe vs bot:mcts-5"}
    summary = by_key["s-summary"][0]
    assert "start policy vs final policy" in summary.data.lower()
    assert f"/runs/{mlflow_run_id}" in summary.data
    progress, = by_key["s-iterations"]
    assert progress.type == "progress" and float(progress.data) == 100.0
    names = {t.name for t in tasks}
    assert {f"{GENERATE_ROLLOUTS} {iter_name(0)}", f"{TRAIN_STEP} {iter_name(0)}",
            "evaluate step 1"} <= names
