"""The time a run has left, estimated from this machine's precision calibration
(tasks/estimate.py): what is left of the run's work, scaled by the block times measured."""
from __future__ import annotations

import json

import pytest

from mars_core.config import load_config
from mars_core.models import precision
from mars_core.run.commit import MARKER
from mars_core.run.layout import EVALUATE, INIT, PREPARE_POLICY, SAVE_CHECKPOINT, stage_dir
from tasks import estimate
from tests.conftest import REPO

DEMO = REPO / "configs/demo.yaml"  # Kuhn Poker by self-play, 5 iterations of 64 games
TTT = REPO / "configs/learning/tic_tac_toe.yaml"  # the papers' layout, 24 games an iteration


def _finish(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text("{}")


def test_a_fresh_demo_has_all_its_work_left(tmp_path, monkeypatch):
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))  # a first run: converts
    cfg = load_config(DEMO, [])
    work = estimate.remaining_work(cfg, tmp_path / "demo")
    assert work == {"conversion": 1, "start": 1, "warmup_example": 12 * 8, "probe_game": 16,
                    "eval_game": 5 * 60, "exploitability_read": 5, "rollout_game": 4 * 64,
                    "update_game": 4 * 64, "update_epoch": 4 * 4, "iteration_stages": 4}
    ttt = estimate.remaining_work(load_config(TTT, []), tmp_path / "ttt")
    assert ttt["eval_game"] == 3 * 2 * 2 * 400 and ttt["exploitability_read"] == 0


def test_what_is_finished_is_not_counted_again(tmp_path, monkeypatch):
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    cfg = load_config(DEMO, [])
    run = tmp_path / "demo"
    for folder in (stage_dir(run, INIT, PREPARE_POLICY), stage_dir(run, INIT, EVALUATE),
                   stage_dir(run, 0, SAVE_CHECKPOINT), stage_dir(run, 0, EVALUATE),
                   stage_dir(run, 1, SAVE_CHECKPOINT), stage_dir(run, 1, EVALUATE)):
        _finish(folder)
    assert estimate.remaining_work(cfg, run) == {
        "conversion": 0, "start": 1, "warmup_example": 0, "probe_game": 0, "eval_game": 120,
        "exploitability_read": 2, "rollout_game": 128, "update_game": 128, "update_epoch": 8,
        "iteration_stages": 2}
    for k in (2, 3):
        _finish(stage_dir(run, k, SAVE_CHECKPOINT))
        _finish(stage_dir(run, k, EVALUATE))
    assert not any(estimate.remaining_work(cfg, run).values())


def test_each_shape_prices_its_own_work():
    """Tic-Tac-Toe's update is priced per game, Kuhn Poker's mirror update per pass over its
    rows: the other kind costs nothing there."""
    tic, kuhn = estimate.REFERENCES["tic_tac_toe"], estimate.REFERENCES["kuhn_poker"]
    assert estimate.estimate_s({"update_epoch": 5}, tic["block_s"], tic) == 0
    assert estimate.estimate_s({"update_game": 5}, kuhn["block_s"], kuhn) == 0
    assert estimate.estimate_s({"update_epoch": 5}, kuhn["block_s"], kuhn) == pytest.approx(
        5 * kuhn["update_epoch"])


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
    cfg = load_config(TTT, [])
    line = estimate.estimate_line(cfg, tmp_path / "ttt")
    want = estimate.duration(estimate.estimate_s(estimate.remaining_work(cfg, tmp_path / "ttt"),
                                                 {k: 4 * v for k, v in ref.items()}))
    assert line.startswith(f"estimate: about {want} to go") and "\n" not in line
    assert "update fp32 0.25x" in line and "play fp32 0.25x" in line
    demo = load_config(DEMO, [])
    kuhn = estimate.REFERENCES["kuhn_poker"]
    want = estimate.duration(estimate.estimate_s(estimate.remaining_work(demo, tmp_path / "d"),
                                                 {k: 4 * v for k, v in ref.items()}, kuhn))
    assert estimate.estimate_line(demo, tmp_path / "d").startswith(f"estimate: about {want} to go")
    big = load_config(REPO / "configs/learning/kuhn_selfplay.yaml", [])  # 256 games: not measured
    assert estimate.estimate_line(big, tmp_path / "kuhn") is None
    ttt = load_config(REPO / "configs/lab/tic_tac_toe_greedy.yaml", [])  # 256 games, compact
    assert estimate.estimate_line(ttt, tmp_path / "ttt256") is None
    assert estimate.estimate_line(load_config(REPO / "configs/lab/kuhn_compact.yaml", []),
                                  tmp_path / "kc") is None  # Kuhn without the mirror update
    monkeypatch.setenv("MARS_BF16_AUTO", "off")  # the test suite's setting: nothing measured
    assert estimate.estimate_line(cfg, tmp_path / "demo") is None


@pytest.mark.parametrize(("seconds", "text"), [(20, "1 min"), (59 * 60, "59 min"),
                                               (115 * 60, "1 h 55 min"), (3600, "1 h 00 min")])
def test_duration(seconds, text):
    assert estimate.duration(seconds) == text


def test_after_the_warm_up_the_rest_is_priced_at_its_pace(tmp_path, monkeypatch):
    """The calibration block can misjudge this machine's speed now: once the warm-up has run,
    the rest of the run is priced again at the pace the warm-up went against its estimate
    (bounded: RESCALE)."""
    monkeypatch.delenv("MARS_BF16_AUTO")
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    kuhn = estimate.REFERENCES["kuhn_poker"]
    monkeypatch.setattr(precision, "calibration", lambda phase: precision.Calibration(
        phase, fp32_s=2 * kuhn["block_s"][phase], bf16_s=kuhn["block_s"][phase]))
    demo, run = load_config(DEMO, []), tmp_path / "demo"
    expected = estimate.warmup_seconds(demo, run)
    assert expected == pytest.approx(kuhn["conversion"] + 96 * kuhn["warmup_example"]
                                     + 16 * kuhn["probe_game"])
    _finish(stage_dir(run, INIT, PREPARE_POLICY))
    assert estimate.warmup_seconds(demo, run) is None  # resumed: no warm-up left to time
    rest = estimate.estimate_s(estimate.remaining_work(demo, run), kuhn["block_s"], kuhn)
    for took, pace in ((expected, 1.0), (2 * expected, 2.0), (0.5 * expected, 0.5),
                       (100 * expected, estimate.RESCALE[1])):
        line = estimate.refined_line(demo, run, expected, took)
        assert line.startswith(f"estimate: about {estimate.duration(rest * pace)} to go")
        assert f"the warm-up took {took:.0f} s where {expected:.0f} s" in line
    monkeypatch.setenv("MARS_BF16_AUTO", "off")
    assert estimate.refined_line(demo, run, expected, expected) is None


def test_mars_train_calibrates_before_its_servers_start(tmp_path, monkeypatch):
    """The calibration is measured (and cached) in `mars train`'s checks, before Prefect's
    temporary server starts beside it; the test suite's MARS_BF16_AUTO measures nothing."""
    import argparse

    from cli import train

    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    args = argparse.Namespace(config=str(DEMO), overlays=[], overrides=[],
                              runs_dir=str(tmp_path / "runs"), run_name="demo")
    train.check(args)  # MARS_BF16_AUTO=off (tests/conftest.py)
    assert not precision.cache_file().exists()
    monkeypatch.delenv("MARS_BF16_AUTO")
    train.check(args)
    cached = json.loads(precision.cache_file().read_text())[precision.machine_key()]
    assert set(cached) == set(precision.PHASES)
    assert all(cached[p]["fp32_s"] > 0 and cached[p]["bf16_s"] > 0 for p in precision.PHASES)
