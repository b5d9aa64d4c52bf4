"""The generalist preset trains on the three MARS training games in one run (tiny model)."""
from __future__ import annotations

import json

import polars as pl
import pytest
from mlflow import MlflowClient

from cli.main import main
from mars_core.config import load_config
from mars_core.run.layout import (ASSIGN_REWARDS, COMPUTE_ADVANTAGES, EPISODES_FILE, EVALUATE,
                                  GENERATE_ROLLOUTS, RESULTS_FILE, SAMPLES_FILE, TURNS_FILE,
                                  stage_dir)
from tests.conftest import REPO
from tests.flows.invariants import check_iteration

GENERALIST = str(REPO / "configs/mars/generalist.yaml")
GAMES = ["tic_tac_toe", "kuhn_poker", "mini_hanabi"]


@pytest.mark.parametrize("preset", ["tic_tac_toe", "kuhn_poker", "mini_hanabi", "generalist"])
def test_mars_presets_hold_the_paper_settings(preset):
    cfg = load_config(REPO / f"configs/mars/{preset}.yaml")
    assert (cfg.optim.lr, cfg.algorithm.kl_coef, cfg.algorithm.dual_clip) == (1e-6, 0.2, 1.4)
    assert (cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.top_k) == (0.6, 0.99, 100)
    assert cfg.run.iterations == 200 and cfg.rollout.max_new_tokens == 4096
    per_game = cfg.rollout.episodes_per_iteration // len(cfg.rollout.games)
    assert per_game == 64 and cfg.rollout.episodes_per_iteration % len(cfg.rollout.games) == 0
    if preset == "generalist":
        assert list(cfg.rollout.games) == GAMES and cfg.rewards.game_scale == {"tic_tac_toe": 2.0}
    else:
        assert cfg.rollout.games == (preset,) and not cfg.rewards.game_scale


@pytest.mark.full  # `make test`: the presets above and several games a run (tests/flows/test_mindgames.py)
def test_generalist_trains_on_three_games_in_one_run(tmp_path, prefect_api, tiny_model_dir):
    rc = main(["train", "--config", GENERALIST, "--runs-dir", str(tmp_path), "--set",
               f"model.path={tiny_model_dir}", "--set", "model.max_context_tokens=1024",
               "--set", "run.iterations=1", "--set", "rollout.episodes_per_iteration=6",
               "--set", "rollout.max_new_tokens=8", "--set", "rollout.keep_history=false",
               "--set", "warmup.steps=1", "--set", "warmup.probe_games=3",
               "--set", "evaluation.games_per_seat=1",
               "--set", "evaluation.opponents={tic_tac_toe: bot:mcts-5}"])
    assert rc == 0
    run = tmp_path / "generalist"
    check_iteration(run, 0, episodes_per_iteration=6)
    episodes = pl.read_parquet(stage_dir(run, 0, GENERATE_ROLLOUTS) / EPISODES_FILE)
    assert sorted(episodes["game"].to_list()) == sorted(GAMES * 2)  # split evenly by game
    samples = pl.read_parquet(stage_dir(run, 0, COMPUTE_ADVANTAGES) / SAMPLES_FILE)
    assert set(samples["game"]) == set(GAMES)
    turns = pl.read_parquet(stage_dir(run, 0, ASSIGN_REWARDS) / TURNS_FILE)
    forfeits = turns.filter(~pl.col("valid")).group_by("game").agg(pl.col("game_reward").min())
    # The tiny model's replies are invalid: Tic-Tac-Toe's forfeit (-1) is doubled to -2.
    assert dict(forfeits.iter_rows()).get("tic_tac_toe", -2.0) == pytest.approx(-2.0)
    results = json.loads((stage_dir(run, 0, EVALUATE) / RESULTS_FILE).read_text())
    assert {(r["game"], r["opponent"]) for r in results} == {
        ("tic_tac_toe", "bot:mcts-5"), ("kuhn_poker", "bot:nash"), ("mini_hanabi", "self"),
        # the held-out games, never trained on (none of them is in the rollouts above)
        ("connect_four", "bot:mcts-10"), ("leduc_poker", "bot:nash"), ("simple_hanabi", "self")}
    strength = (run / "final" / "strength" / "strength.md").read_text()
    assert "| final | leduc_poker | bot:nash |" in strength and "| reading |" in strength
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("mars-generalist")
    parent = [r for r in client.search_runs([exp.experiment_id])
              if "mlflow.parentRunId" not in r.data.tags]
    metrics = parent[0].data.metrics
    assert {"rollout/kuhn_poker/episodes", "rollout/mini_hanabi/invalid_action_rate",
            "eval/kuhn_poker/seat0_normalized_return", "train/loss",
            # the policy's exact exploitability, read at every information state
            "eval/kuhn_poker/exploitability", "eval/leduc_poker/exploitability"} <= set(metrics)
    assert 0 < metrics["eval/kuhn_poker/exploitability"] <= 2
    table = json.loads((stage_dir(run, 0, EVALUATE) / "exploitability_leduc_poker.json")
                       .read_text())
    assert len(table["policy"]) == 936 and table["temperature"] == 0.6
