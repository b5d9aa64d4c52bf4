"""`rollout.overlap`: iteration k+1's games are played in a thread while iteration k trains,
by the policy before that update (one update behind), and the update's importance weight
corrects the lag. A tiny-model run of three iterations: which weights played each
iteration, that the task runs overlap in Prefect, that the lagged games carry a behaviour
gap the synchronous run does not have, and that the run resumes as any other."""
from __future__ import annotations

import asyncio

import pytest

import tasks.rollout
from cli.main import main
from mars_core.config import load_config
from mars_core.run.commit import read_json
from mars_core.run.layout import (GENERATE_ROLLOUTS, METRICS_FILE, TRAIN_STEP, checkpoint_dir,
                                  stage_dir, start_model_dir)
from tests.conftest import REPO

SMOKE = str(REPO / "configs/smoke.yaml")


def _sets(model) -> list[str]:
    return [f"model.path={model}", "run.iterations=3", "rollout.max_new_tokens=8",
            "warmup.steps=1", "warmup.probe_games=1", "evaluation.every=0", "optim.lr=1e-2",
            "algorithm.entropy_coef=0.5", "checkpoint.keep_last=1",
            # untruncated sampling: the policy that played and the one updated then give the
            # same log-probs unless their weights differ (the gap is the lag alone)
            "rollout.top_k=0", "rollout.top_p=1.0"]


def _train(runs, name, sets) -> int:
    return main(["train", "--config", SMOKE, "--runs-dir", str(runs), "--run-name", name,
                 *[a for s in sets for a in ("--set", s)]])


def _task_runs(runs_dir):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read():
        async with get_client() as client:
            flows = [r for r in await client.read_flow_runs()
                     if r.parameters.get("runs_dir") == str(runs_dir)]
            return await client.read_task_runs(flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[flows[-1].id])))

    return {t.name: t for t in asyncio.run(read())}


def _gap(run, k) -> float:
    return read_json(stage_dir(run, k, TRAIN_STEP) / METRICS_FILE)["train/behaviour_gap_abs"]


def test_overlapped_rollouts_play_one_update_behind(tmp_path, prefect_api, tiny_model_dir,
                                                    monkeypatch):
    played = []
    make_engine = tasks.rollout.make_engine

    def recording(cfg, path, *args, **kwargs):
        played.append(path)
        return make_engine(cfg, path, *args, **kwargs)

    monkeypatch.setattr(tasks.rollout, "make_engine", recording)
    runs = tmp_path / "runs"
    assert _train(runs, "o", [*_sets(tiny_model_dir), "rollout.overlap=true"]) == 0
    run = runs / "o"
    # iterations 0 and 1 play the start policy, iteration 2 the checkpoint of iteration 0
    assert played == [str(start_model_dir(run))] * 2 + [str(checkpoint_dir(run, 0))]
    tasks_by_name = _task_runs(runs)
    for k in (1, 2):  # k's games began before k-1's update ended: overlapping task runs
        games = tasks_by_name[f"{GENERATE_ROLLOUTS} iter_{k:04d}"]
        update = tasks_by_name[f"{TRAIN_STEP} iter_{k - 1:04d}"]
        assert games.start_time < update.end_time and update.start_time < games.end_time
    # the lag is seen and corrected: the update's policy is not the one that played
    assert _gap(run, 2) > 1e-4

    # the same without overlap: every iteration played by the newest policy, no gap
    played.clear()
    assert _train(runs, "s", _sets(tiny_model_dir)) == 0
    assert played == [str(start_model_dir(runs / "s"))] + [
        str(checkpoint_dir(runs / "s", j)) for j in (0, 1)]
    print("behaviour gaps, iteration 2: overlap", _gap(run, 2), "synchronous", _gap(runs / "s", 2))
    assert _gap(runs / "s", 2) < 1e-4 < _gap(run, 2)


def test_overlap_needs_the_importance_correction():
    with pytest.raises(Exception, match="rollout.overlap .* algorithm.is_cap"):
        load_config(SMOKE, ["rollout.overlap=true", "algorithm.is_cap=null"])
