"""The MindGames (TextArena) games in the pipeline: a preset mixing a TextArena game with an
OpenSpiel game trains through build_players -> filter_steps -> assign_rewards, and the
strategic evaluation plays all four games (tiny model, bots)."""
from __future__ import annotations

import json

import polars as pl
import pytest
from mlflow import MlflowClient

from cli.main import main
from mars_core.config import load_config, load_game_eval_config
from mars_core.games.opponents import MINDGAMES_OPPONENTS
from mars_core.run.layout import (ASSIGN_REWARDS, BUILD_PLAYERS, COMPUTE_ADVANTAGES, FILTER_STEPS,
                                  PLAYERS_FILE, SAMPLES_FILE, TURNS_FILE, iter_dir)
from mars_core.run.commit import MARKER
from mars_core.games.catalog import MINDGAMES
from mars_core.games.registry import make_game
from tests.conftest import REPO
from tests.flows.invariants import check_iteration

MIXED = str(REPO / "configs/mindgames/mixed.yaml")


def test_presets_load():
    cfg = load_config(MIXED)
    assert cfg.rollout.games == ("tic_tac_toe", "colonel_blotto")
    blotto = cfg.rollout.per_game_sampling(0)["colonel_blotto"]
    assert (blotto.temperature, blotto.top_p, blotto.top_k) == (1.0, 1.0, 0)
    assert set(load_config(REPO / "configs/mindgames/textarena.yaml").rollout.games) == set(MINDGAMES)
    full = load_game_eval_config(REPO / "configs/eval/mindgames_strategic.yaml")
    assert set(full.suite) == set(MINDGAMES)
    codenames = full.play.per_game_sampling(0)["codenames"]
    assert (codenames.temperature, codenames.top_p, codenames.top_k, codenames.min_p) == (
        0.7, 0.8, 30, 0.05)
    assert set(load_game_eval_config(REPO / "configs/eval/mindgames_strategic_quick.yaml").suite) \
        == set(MINDGAMES)


def test_mixed_preset_trains_through_the_post_episode_stages(tmp_path, prefect_api, tiny_model_dir):
    rc = main(["train", "--config", MIXED, "--runs-dir", str(tmp_path), "--set",
               f"model.path={tiny_model_dir}", "--set", "model.max_context_tokens=1024",
               "--set", "run.iterations=1", "--set", "rollout.episodes_per_iteration=4",
               "--set", "rollout.max_new_tokens=8", "--set", "warmup.steps=1",
               "--set", "warmup.probe_games=2", "--set", "evaluation.games_per_seat=1",
               "--set", "rollout.opponents={colonel_blotto: bot:blotto-focus}",
               "--set", "evaluation.opponents={tic_tac_toe: bot:mcts-5}"])
    assert rc == 0
    it = iter_dir(tmp_path / "mixed", 0)
    check_iteration(tmp_path / "mixed", 0, episodes_per_iteration=4)
    for stage in (BUILD_PLAYERS, FILTER_STEPS, ASSIGN_REWARDS):
        assert (it / stage / MARKER).is_file()
    players = pl.read_parquet(it / BUILD_PLAYERS / PLAYERS_FILE)
    blotto = players.filter(pl.col("game") == "colonel_blotto")
    assert set(blotto["agent"]) == {"policy", "bot:blotto-focus"}  # the policy's seat rotates
    assert set(blotto.filter(pl.col("trainable"))["player"]) == {0, 1}
    turns = pl.read_parquet(it / ASSIGN_REWARDS / TURNS_FILE)
    bot_turns = turns.filter(pl.col("agent") != "policy")
    assert len(bot_turns) and set(bot_turns["gate_reason"]) == {"not_trainable"}
    assert not bot_turns["eligible"].any()
    samples = pl.read_parquet(it / COMPUTE_ADVANTAGES / SAMPLES_FILE)
    assert set(samples["game"]) <= {"tic_tac_toe", "colonel_blotto"}
    # each sample carries the temperature it was drawn at: Blotto's own 1.0, the run's 0.6
    assert set(samples.select("game", "temperature").unique().iter_rows()) <= {
        ("tic_tac_toe", 0.6), ("colonel_blotto", 1.0)}
    eligible = turns.filter(pl.col("eligible") & (pl.col("agent") == "policy"))
    assert len(samples) == len(eligible.filter(pl.col("completion_ids").list.len() > 0))
    # each trained seat keeps its whole return: a tokenless step's reward (a context overflow's
    # penalty) is carried onto the seat's last trainable turn, never dropped
    def returns(df):
        return dict(((e, p), r) for e, p, r in df.group_by("episode_id", "player")
                    .agg(pl.col("reward").sum()).iter_rows())

    trained = returns(samples)
    assert trained == pytest.approx({seat: r for seat, r in returns(eligible).items()
                                     if seat in trained})
    # the tiny model's replies are invalid: a Blotto error step gets the parsing floor
    errors = turns.filter((pl.col("game") == "colonel_blotto") & ~pl.col("valid"))
    assert len(errors) and set(errors["reward"]) <= {-1.0, -0.9}
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("mindgames-mixed")
    parent = [r for r in client.search_runs([exp.experiment_id])
              if "mlflow.parentRunId" not in r.data.tags][0]
    metrics = parent.data.metrics
    assert metrics["gated/not_trainable"] == len(bot_turns)
    assert {"gated/total", "reward/colonel_blotto/mean", "reward/tic_tac_toe/mean",
            "players/colonel_blotto/episode_reward_mean", "eval/colonel_blotto/seat0_normalized_return"
            } <= set(metrics)


def test_strategic_eval_plays_all_four_mindgames(tmp_path, prefect_api, tiny_model_dir):
    out = tmp_path / "mg.json"
    assert main(["eval", "strategic", "--policy", "bot:random", "--games", ",".join(MINDGAMES),
                 "--n", "2", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    cells = {(r["game"], r["opponent"], r["seat"]) for r in records}
    assert cells == {(g, o, s) for g in MINDGAMES for o in MINDGAMES_OPPONENTS[g]
                     for s in range(make_game(g).num_players)}
    assert all(r["n"] == 2 and r["invalid_rate"] == 0 for r in records)
    # the model path: every game plays to its end (here the tiny model's invalid replies)
    out = tmp_path / "mg_model.json"
    assert main(["eval", "strategic", "--policy", str(tiny_model_dir), "--preset",
                 str(REPO / "configs/eval/mindgames_strategic_quick.yaml"), "--n", "1",
                 "--set", "play.max_new_tokens=8", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert {r["game"] for r in records} == set(MINDGAMES)
