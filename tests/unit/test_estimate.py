"""The time a run has left, estimated from this machine's precision calibration
(tasks/estimate.py): what is left of the run's work, scaled by the block times measured."""
from __future__ import annotations

import pytest

from mars_core.config import load_config
from mars_core.models import precision
from mars_core.run.commit import MARKER
from mars_core.run.layout import EVALUATE, INIT, PREPARE_POLICY, SAVE_CHECKPOINT, stage_dir
from tasks import estimate
from tests.conftest import REPO

DEMO = REPO / "configs/demo.yaml"


def _finish(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text("{}")


def test_a_fresh_demo_has_all_its_work_left(tmp_path):
    cfg = load_config(DEMO, [])
    work = estimate.remaining_work(cfg, tmp_path / "demo")
    assert work == {"warmup_example": 12 * 8, "probe_game": 8, "eval_game": 2 * 20,
                    "rollout_game": 4 * 8, "update_game": 4 * 8}


def test_what_is_finished_is_not_counted_again(tmp_path):
    cfg = load_config(DEMO, [])
    run = tmp_path / "demo"
    for folder in (stage_dir(run, INIT, PREPARE_POLICY), stage_dir(run, INIT, EVALUATE),
                   stage_dir(run, 0, SAVE_CHECKPOINT), stage_dir(run, 1, SAVE_CHECKPOINT)):
        _finish(folder)
    assert estimate.remaining_work(cfg, run) == {
        "warmup_example": 0, "probe_game": 0, "eval_game": 20, "rollout_game": 16,
        "update_game": 16}
    for k in (2, 3):
        _finish(stage_dir(run, k, SAVE_CHECKPOINT))
    _finish(stage_dir(run, 3, EVALUATE))
    assert not any(estimate.remaining_work(cfg, run).values())


def test_the_estimate_scales_with_the_measured_block_times():
    work = {"warmup_example": 96, "probe_game": 8, "eval_game": 40, "rollout_game": 32,
            "update_game": 32}
    ref = estimate.REFERENCE["block_s"]
    here = estimate.estimate_s(work, ref)
    assert here > 0
    assert estimate.estimate_s(work, {k: 5 * v for k, v in ref.items()}) == pytest.approx(5 * here)
    slower_play = estimate.estimate_s(work, {"update": ref["update"], "play": 2 * ref["play"]})
    assert here < slower_play < 2 * here


def test_the_line_comes_from_the_calibration(tmp_path, monkeypatch):
    monkeypatch.delenv("MARS_BF16_AUTO")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    ref = estimate.REFERENCE["block_s"]
    # an AVX2-only CPU: bf16 5x slower than fp32, fp32 4x slower than the reference
    monkeypatch.setattr(precision, "calibration", lambda phase: precision.Calibration(
        phase, fp32_s=4 * ref[phase], bf16_s=20 * ref[phase]))
    cfg = load_config(DEMO, [])
    line = estimate.estimate_line(cfg, tmp_path / "demo")
    want = estimate.duration(estimate.estimate_s(estimate.remaining_work(cfg, tmp_path / "demo"),
                                                 {k: 4 * v for k, v in ref.items()}))
    assert line.startswith(f"estimate: about {want} to go") and "\n" not in line
    assert "update fp32 0.25x" in line and "play fp32 0.25x" in line
    kuhn = load_config(REPO / "configs/lab/kuhn_compact.yaml", [])
    assert estimate.estimate_line(kuhn, tmp_path / "kuhn") is None  # not the measured shape
    ttt = load_config(REPO / "configs/lab/tic_tac_toe_greedy.yaml", [])  # 256 games, compact
    assert estimate.estimate_line(ttt, tmp_path / "ttt") is None
    assert estimate.estimate_line(load_config(REPO / "configs/learning/tic_tac_toe.yaml", []),
                                  tmp_path / "ttt24") is not None  # 24 games, the papers' layout
    monkeypatch.setenv("MARS_BF16_AUTO", "off")  # the test suite's setting: nothing measured
    assert estimate.estimate_line(cfg, tmp_path / "demo") is None


@pytest.mark.parametrize(("seconds", "text"), [(20, "1 min"), (59 * 60, "59 min"),
                                               (115 * 60, "1 h 55 min"), (3600, "1 h 00 min")])
def test_duration(seconds, text):
    assert estimate.duration(seconds) == text
