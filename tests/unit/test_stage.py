"""An iteration stage declared once (tasks/stage.py): the task `@iteration_stage` makes reads the
config once, resolves the declared inputs, commits the stage through the stage runner (a
finished stage is not redone), and the training flow runs every declared stage in the layout's
order, the games played ahead and the evaluation in their places."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import flows.train as train_flow
from mars_core.config import dump_config, load_config
from mars_core.run import layout
from mars_core.run.commit import is_done
from mars_core.run.layout import (ASSIGN_REWARDS, BANK_EPISODES, CONFIG_FILE, EVALUATE,
                                  GENERATE_ROLLOUTS, ITERATION_STAGES, METRICS_FILE,
                                  SAVE_CHECKPOINT, TRAIN_STEP, stage_dir)
from tasks import stage as stage_module
from tasks.stage import STAGE_TASKS, StageContext, iteration_stage, stage_task
from tests.conftest import REPO


@pytest.fixture
def run_dir(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / CONFIG_FILE).write_text(dump_config(load_config(REPO / "configs" / "smoke.yaml")))
    return run


def test_every_iteration_stage_but_the_evaluation_is_declared_once():
    assert set(STAGE_TASKS) == set(ITERATION_STAGES) - {EVALUATE}
    for name, made in STAGE_TASKS.items():
        assert made.stage == name and made.task_run_name == name + " iter_{k:04d}"
        assert made.name == made.body.__name__ and made.retries == 1
    with pytest.raises(KeyError, match="no task declares the iteration stage 'evaluate'"):
        stage_task(EVALUATE)
    with pytest.raises(ValueError, match="'nope' is not an iteration stage"):
        iteration_stage("nope")


def test_a_declared_stage_reads_its_inputs_and_commits_once(run_dir, monkeypatch):
    seen: list[StageContext] = []
    reads = []
    monkeypatch.setattr(stage_module, "read_config",
                        lambda d: reads.append(d) or load_config(Path(d) / CONFIG_FILE))

    def body(ctx: StageContext, out: Path) -> dict:
        seen.append(ctx)
        (out / "x.json").write_text(json.dumps(sorted(ctx.inputs)))
        return {"toy/n": 1.0}

    body.__name__ = body.__qualname__ = "toy_bank"
    monkeypatch.setitem(STAGE_TASKS, BANK_EPISODES, None)  # restored after the test
    made = iteration_stage(BANK_EPISODES)(body)
    monkeypatch.setattr(stage_module, "run_stage", _offline_run_stage)
    metrics = made.fn(str(run_dir), 3)
    assert metrics["toy/n"] == 1.0 and len(seen) == 1 and len(reads) == 1
    ctx = seen[0]
    assert ctx.k == 3 and ctx.stage == BANK_EPISODES and ctx.cfg.run.seed is not None
    assert ctx.inputs == {ASSIGN_REWARDS: stage_dir(run_dir, 3, ASSIGN_REWARDS)}
    assert ctx.folder == stage_dir(run_dir, 3, BANK_EPISODES)
    with pytest.raises(layout.UndeclaredInput, match="EARLIER_INPUTS"):
        ctx.earlier(ASSIGN_REWARDS, at=2)
    final = stage_dir(run_dir, 3, BANK_EPISODES)
    assert is_done(final) and json.loads((final / "x.json").read_text()) == [ASSIGN_REWARDS]
    assert made.fn(str(run_dir), 3)["toy/n"] == 1.0 and len(seen) == 1  # resumed: not redone
    assert STAGE_TASKS[BANK_EPISODES] is made


def _offline_run_stage(run_dir, k, stage, body, step, **publish):
    """run_stage's commit without publishing (no tracking server in a unit test)."""
    from mars_core.run.commit import read_json, stage_output, write_json

    final = stage_dir(run_dir, k, stage)
    if not is_done(final):
        with stage_output(final, fault=f"{stage}:{k}") as out:
            write_json(out / METRICS_FILE, body(out))
    return read_json(final / METRICS_FILE)


def test_when_false_writes_no_folder(run_dir, monkeypatch):
    monkeypatch.setitem(STAGE_TASKS, BANK_EPISODES, None)
    made = iteration_stage(BANK_EPISODES, when=lambda ctx: False)(lambda ctx, out: {"a": 1.0})
    assert made.fn(str(run_dir), 0) == {}
    assert not stage_dir(run_dir, 0, BANK_EPISODES).exists()


@pytest.mark.parametrize("overlap", [False, True])
def test_the_flow_runs_the_declared_stages_in_the_layouts_order(monkeypatch, tmp_path, overlap):
    ran: list[str] = []
    for name in STAGE_TASKS:
        monkeypatch.setitem(STAGE_TASKS, name, lambda run_dir, k, _n=name: ran.append(_n) or {_n: k})
    monkeypatch.setattr(train_flow, "evaluate", lambda *a: ran.append(EVALUATE) or {})
    monkeypatch.setattr(train_flow, "_evaluated", lambda run_dir, k, metrics, trained: metrics)

    class Ahead:
        def result(self):
            return {"ahead": 1.0}

        def exception(self):
            ran.append("wait ahead")

    monkeypatch.setattr(train_flow, "_ahead", lambda run_dir, k: ran.append(f"ahead {k}") or Ahead())
    ahead: dict = {}
    metrics = train_flow._iteration(str(tmp_path), 0, True, ahead, overlap)
    expected = list(ITERATION_STAGES)
    if overlap:
        expected.insert(expected.index(TRAIN_STEP), "ahead 1")
        expected.insert(expected.index(SAVE_CHECKPOINT), "wait ahead")
    assert ran == expected and metrics[TRAIN_STEP] == 0
    ran.clear()
    train_flow._iteration(str(tmp_path), 1, False, ahead, False)  # not evaluated
    played_ahead = (GENERATE_ROLLOUTS,) if overlap else ()  # iteration 1's games: from `ahead`
    assert ran == [s for s in ITERATION_STAGES if s not in (*played_ahead, EVALUATE)]
