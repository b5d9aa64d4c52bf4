"""A run that evaluates its start policy ends with the start and final policies' strength side
by side, paired on the same deals (tiny model)."""
from __future__ import annotations

import json

from mlflow import MlflowClient

from cli.main import main
from tests.conftest import REPO

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
    rows = json.loads((run / "final/strength/strength.json").read_text())
    assert {(r["policy"], r["opponent"]) for r in rows} == {
        (p, o) for p in ("start", "final") for o in ("bot:random", "bot:mcts-5")}
    for r in rows:
        assert r["n"] == r["paired_n"] == 6  # both seats, the same six deals in both
        assert 0 <= r["normalized_return"] <= 100 and r["ci95"] >= 0
    printed = caplog.text  # the flow prints (log_prints): the table ends the run's output
    assert "start policy vs final policy" in printed
    assert "| final | tic_tac_toe | bot:mcts-5 | 6 |" in printed
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("mars-smoke")
    parent, = [r for r in client.search_runs([exp.experiment_id])
               if "mlflow.parentRunId" not in r.data.tags]
    metrics = parent.data.metrics  # MLflow names: `bot:random` is logged as `bot_random`
    assert {"strength/tic_tac_toe/bot_random/diff", "strength/tic_tac_toe/bot_mcts-5/final",
            "eval/tic_tac_toe/bot_random/seat0_normalized_return",
            "eval/tic_tac_toe/bot_mcts-5/seat1_normalized_return"} <= set(metrics)
