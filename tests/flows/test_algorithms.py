"""Issue 5 end to end on a tiny model: every estimator trains through `mars train`; the In2AI
preset's bank, stratified batches, curriculum and frozen opponents; RAE state survives a kill
and a resume; the comparison flow logs its table, and across seeds (issue 32) its aggregate."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import polars as pl
import pytest
from mlflow import MlflowClient

from cli.main import main
from mars_core.advantages.estimators import ESTIMATORS
from mars_core.run.layout import (ASSIGN_REWARDS, BATCH_FILE, BUILD_BATCH, BUILD_PLAYERS,
                                  COMPOSITION_FILE, COMPUTE_ADVANTAGES, EPISODES_FILE, EVALUATE,
                                  FINAL, GENERATE_ROLLOUTS, PLAYERS_FILE, SAMPLES_FILE, STRENGTH,
                                  TURNS_FILE, checkpoint_dir, iter_dir, stage_dir)
from tests.conftest import REPO
from tests.flows.invariants import check_iteration

SMOKE = str(REPO / "configs/smoke.yaml")


def _tiny(model, *extra) -> list[str]:
    sets = [f"model.path={model}", "model.max_context_tokens=1024", "rollout.max_new_tokens=8",
            "warmup.steps=1", "warmup.probe_games=1", "evaluation.games_per_seat=1", *extra]
    return [arg for s in sets for arg in ("--set", s)]


# `make test` trains the paper's estimator, the one with state across iterations and the one fed
# by the games' own values; `make test-full` every estimator (each one's arithmetic is unit-tested)
IN_MAKE_TEST = {"mars", "rae", "monte_carlo"}


@pytest.mark.parametrize("estimator", [
    pytest.param(e, marks=() if e in IN_MAKE_TEST else pytest.mark.full) for e in sorted(ESTIMATORS)])
def test_every_estimator_trains_at_the_smoke_scale(estimator, tmp_path, prefect_api, tiny_model_dir):
    extra = {"rloo_env": ["batching.unit=turn"],
             "monte_carlo": ["rollout.mc_rollouts=4"]}.get(estimator, [])
    rc = main(["train", "--config", SMOKE, "--runs-dir", str(tmp_path), "--run-name", estimator,
               *_tiny(tiny_model_dir, f"algorithm.estimator={estimator}", "evaluation.every=0",
                      *extra)])
    assert rc == 0
    run = tmp_path / estimator
    for k in (0, 1):
        check_iteration(run, k, episodes_per_iteration=4)
        samples = pl.read_parquet(stage_dir(run, k, COMPUTE_ADVANTAGES) / SAMPLES_FILE)
        assert len(samples) and samples["advantage"].is_finite().all()
        if estimator == "monte_carlo":  # the values reached the batch from the games
            batch = pl.read_parquet(stage_dir(run, k, BUILD_BATCH) / BATCH_FILE)
            assert (batch["action_values"] != "").all()
        assert (checkpoint_dir(run, k) / "estimator_state.json").is_file()
    state = json.loads((checkpoint_dir(run, 1) / "estimator_state.json").read_text())
    assert bool(state.get("rae")) == (estimator == "rae")


def test_in2ai_preset_bank_batches_curriculum_and_frozen_opponents(tmp_path, prefect_api,
                                                                    tiny_model_dir):
    rc = main(["train", "--config", str(REPO / "configs/mindgames/in2ai.yaml"), "--runs-dir",
               str(tmp_path), *_tiny(tiny_model_dir, "batching.size=6", "evaluation.every=0")])
    assert rc == 0
    run = tmp_path / "in2ai"
    assert sorted(p.name for p in (run / "bank").iterdir()) == [
        "iter_0000.parquet", "iter_0001.parquet", "iter_0002.parquet"]
    seen: set[str] = set()
    for k in range(3):
        it = iter_dir(run, k)
        batch = pl.read_parquet(it / BUILD_BATCH / BATCH_FILE)
        assert set(batch["agent"]) == {"policy"} and batch["eligible"].all()
        assert not seen & set(batch["turn_id"])  # a step is trained on once
        seen |= set(batch["turn_id"])
        per_episode = batch.group_by("episode_id").len()["len"]
        assert per_episode.max() <= 4 or batch["episode_id"].n_unique() == 1
        comp = json.loads((it / BUILD_BATCH / COMPOSITION_FILE).read_text())
        assert comp["steps"] == len(batch) <= 6
        episodes = pl.read_parquet(it / GENERATE_ROLLOUTS / EPISODES_FILE)
        agents = {a for row in episodes["agents"] for a in row}
        # the curriculum: iteration 0 meets only the first opponents, 2 also frozen / self
        if k == 0:
            assert agents == {"policy", "bot:random", "bot:always-defect"}
        if k == 2:
            assert any(a.startswith("frozen:") for a in agents)
        assert (episodes["game"] == "three_player_ipd").sum() == 4  # game weights 1 : 2
    players = pl.read_parquet(stage_dir(run, 2, BUILD_PLAYERS) / PLAYERS_FILE)
    frozen = players.filter(pl.col("agent").str.starts_with("frozen:"))
    assert len(frozen) and not frozen["trainable"].any()  # only the policy's seats train
    turns = pl.read_parquet(stage_dir(run, 2, ASSIGN_REWARDS) / TURNS_FILE)
    assert not turns.filter(pl.col("agent") != "policy")["eligible"].any()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("mindgames-in2ai")
    parent = [r for r in client.search_runs([exp.experiment_id])
              if "mlflow.parentRunId" not in r.data.tags][0]
    hist = client.get_metric_history(parent.info.run_id, "batch/steps")
    assert sorted(m.step for m in hist) == [0, 1, 2]
    assert {"batch/game/colonel_blotto", "batch/bin/0", "bank/steps_added",
            "opponents/colonel_blotto/bot_random/episodes"} <= set(parent.data.metrics)


@pytest.mark.full  # `make test`: the kill points (tests/faults) and RAE's state per checkpoint above
def test_rae_state_survives_a_kill_and_resume(tmp_path, prefect_api, tiny_model_dir):
    def args(name):
        return [sys.executable, "-m", "cli.main", "train", "--config", SMOKE, "--runs-dir",
                str(tmp_path), "--run-name", name,
                *_tiny(tiny_model_dir, "algorithm.estimator=rae", "evaluation.every=0",
                       "run.iterations=3")]

    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(REPO)}
    ref = subprocess.run(args("ref"), env=env, cwd=REPO, capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr[-3000:]
    cut = stage_dir(tmp_path / "cut", 2, COMPUTE_ADVANTAGES)
    paused = cut.with_name(cut.name + ".partial") / "PAUSED"
    proc = subprocess.Popen(args("cut"), env={**env, "MARS_FAULT_PAUSE": f"{COMPUTE_ADVANTAGES}:2"},
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.time() + 600
    while not paused.is_file():
        assert proc.poll() is None and time.time() < end, "the run did not reach the pause"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    again = subprocess.run(args("cut"), env=env, cwd=REPO, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]

    def state(name, k):
        path = checkpoint_dir(tmp_path / name, k) / "estimator_state.json"
        return json.loads(path.read_text())["rae"]

    assert state("ref", 0) and state("ref", 1) != state("ref", 0)  # the baselines move
    for k in range(3):
        assert state("cut", k) == state("ref", k)
    adv = [pl.read_parquet(stage_dir(tmp_path / n, 2, COMPUTE_ADVANTAGES) / SAMPLES_FILE)
           ["advantage"].to_list() for n in ("ref", "cut")]
    assert adv[0] == adv[1]


def test_compare_flow_logs_one_table(tmp_path, prefect_api, tiny_model_dir):
    presets = [str(REPO / f"configs/ablations/{p}.yaml") for p in ("mars", "wo_turn_level")]
    rc = main(["compare", "--presets", ",".join(presets), "--overlay",
               str(REPO / "configs/scales/smoke.yaml"), "--runs-dir", str(tmp_path),
               "--games", "tic_tac_toe,kuhn_poker", "--n", "1",
               *_tiny(tiny_model_dir, "run.iterations=1", "evaluation.every=0",
                      "rollout.episodes_per_iteration=3")])
    assert rc == 0
    rows = json.loads((tmp_path / "ablations-compare/comparison.json").read_text())
    assert [r["policy"] for r in rows] == ["start", "mars", "wo_turn_level"]
    assert all(set(r) == {"policy", "tic_tac_toe", "kuhn_poker", "mean"} for r in rows)
    assert "| policy | tic_tac_toe | kuhn_poker | mean |" in (
        tmp_path / "ablations-compare/comparison.md").read_text()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("mars-ablations")
    runs = client.search_runs([exp.experiment_id], "tags.`mars.kind` = 'comparison'")
    assert len(runs) == 1
    assert "normalized_return/wo_turn_level/kuhn_poker" in runs[0].data.metrics
    artifacts = {a.path for a in client.list_artifacts(runs[0].info.run_id)}
    assert {"comparison.md", "comparison_table.json"} <= artifacts
    trained = [r for r in client.search_runs([exp.experiment_id])
               if r.data.tags.get("mars.kind") != "comparison" and "mlflow.parentRunId" not in r.data.tags]
    assert len(trained) == 2  # the two training runs log into the same experiment


@pytest.mark.full  # `make test`: the comparison over one seed (test_compare_flow_logs_one_table)
def test_compare_across_seeds_aggregates_logs_once_and_skips_finished_runs(
        tmp_path, prefect_api, tiny_model_dir, caplog):
    """`mars compare --seeds`: 2 variants x 2 seeds over the Kuhn recipe at the tiniest scale;
    the table over seeds, one MLflow parent run with a child per (variant, seed); a rerun after
    one run lost its last stage redoes that stage alone and logs no second comparison."""
    variants = [str(REPO / f"configs/ablations/variants/{v}.yaml") for v in ("mars", "grpo")]
    argv = ["compare", "--seeds", "0,1", "--bases", str(REPO / "configs/lab/kuhn_ppo.yaml"),
            "--variants", ",".join(variants), "--overlay", str(REPO / "configs/scales/smoke.yaml"),
            "--runs-dir", str(tmp_path), "--n", "2",
            *_tiny(tiny_model_dir, "run.iterations=1", "rollout.episodes_per_iteration=2",
                   "evaluation.at_start=true")]
    assert main(argv) == 0
    names = [f"ablate-kuhn_ppo-{v}-s{s}" for s in (0, 1) for v in ("mars", "grpo")]
    table = json.loads((tmp_path / "ablate-compare/ablation.json").read_text())
    rows = table["rows"]
    assert table["reference"] == "mars" and table["seeds"] == [0, 1]
    assert [(r["opponent"], r["variant"]) for r in rows] == [
        (o, v) for o in ("bot:nash", "bot:random", "all") for v in ("mars", "grpo")]
    for r in rows:
        assert r["seeds"] == [0, 1] and r["ci95"] is not None and r["game"] == "kuhn_poker"
        assert (r["diff"] is None) == (r["variant"] == "mars")
        assert len(r["gain_per_seed"]) == 2 and r["gain_ci95"] is not None  # vs its own start
    grpo = [r for r in rows if r["variant"] == "grpo"]
    assert all(r["diff_ci95"] is not None and r["paired_games"] in ([4, 4], [8, 8]) for r in grpo)
    assert {b["iterations"] for b in table["curves"]} == {0, 1}  # start and after iteration 1
    assert "| kuhn_ppo | kuhn_poker | bot:random | grpo | 2 |" in (
        tmp_path / "ablate-compare/ablation.md").read_text()
    assert (tmp_path / "ablate-compare/ablation.png").is_file()

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("mars-ablations")

    def runs():
        every = client.search_runs([exp.experiment_id])
        parents = [r for r in every if r.data.tags.get("mars.kind") == "ablation"
                   and "mlflow.parentRunId" not in r.data.tags]
        trained = [r for r in every if "mars.kind" not in r.data.tags
                   and "mlflow.parentRunId" not in r.data.tags]
        return parents, trained, every

    parents, trained, every = runs()
    assert len(parents) == 1 and sorted(r.info.run_name for r in trained) == sorted(names)
    children = [r for r in every if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert sorted((r.data.tags["mars.variant"], r.data.tags["mars.seed"]) for r in children) == [
        ("grpo", "0"), ("grpo", "1"), ("mars", "0"), ("mars", "1")]
    assert {r.data.tags["mars.train_run_id"] for r in children} == {r.info.run_id for r in trained}
    child = next(r for r in children if r.data.tags["mars.variant"] == "grpo")
    assert {"diff/kuhn_poker/bot_random", "gain/kuhn_poker/bot_random"} <= set(child.data.metrics)
    curve = client.get_metric_history(child.info.run_id, "curve/kuhn_poker vs bot_random")
    assert sorted(m.step for m in curve) == [0, 1]
    assert "final/kuhn_ppo/kuhn_poker/bot_random/grpo" in parents[0].data.metrics

    # one run cut after its last evaluation: only it goes through its training flow again
    cut = tmp_path / names[3]
    kept = stage_dir(cut, 0, EVALUATE).stat().st_mtime_ns
    shutil.rmtree(stage_dir(cut, FINAL, STRENGTH))
    finals = {n: stage_dir(tmp_path / n, FINAL, STRENGTH).stat().st_mtime_ns for n in names[:3]}
    caplog.clear()
    assert main(argv) == 0
    said = caplog.text  # the flow's prints go to its Prefect log
    assert sorted(n for n in names if f"{n}: finished before, skipped" in said) == sorted(names[:3])
    assert stage_dir(cut, FINAL, STRENGTH).is_dir()  # redone
    assert stage_dir(cut, 0, EVALUATE).stat().st_mtime_ns == kept  # its finished stages kept
    assert {n: stage_dir(tmp_path / n, FINAL, STRENGTH).stat().st_mtime_ns
            for n in names[:3]} == finals
    parents_again, trained_again, _ = runs()
    assert [r.info.run_id for r in parents_again] == [parents[0].info.run_id]  # logged once
    assert len(trained_again) == 4
    assert json.loads((tmp_path / "ablate-compare/ablation.json").read_text())["rows"] == rows
