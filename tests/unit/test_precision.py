"""`model.bf16: auto` by measurement: timed once per machine and phase, cached, forced by on/off."""
from __future__ import annotations

import json

import pytest

from mars_core.models import precision


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """`auto` measures (the suite answers it without measuring), into a temporary cache."""
    monkeypatch.delenv("MARS_BF16_AUTO", raising=False)
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path))
    calls = []
    real = precision.calibrate
    monkeypatch.setattr(precision, "calibrate", lambda phase: calls.append(phase) or real(
        phase, budget_s=0.02))
    return calls


def test_on_and_off_force_it_without_measuring(measured):
    assert precision.bf16_for("on", "update") is True
    assert precision.bf16_for("off", "play") is False
    assert measured == []


def test_auto_measures_once_per_phase_and_caches_by_machine(measured, tmp_path):
    first = {ph: precision.bf16_for("auto", ph) for ph in precision.PHASES}
    again = {ph: precision.bf16_for("auto", ph) for ph in precision.PHASES}
    assert first == again and measured == ["update", "play"]  # the second round read the cache
    data = json.loads((tmp_path / "precision.json").read_text())
    entry = data[precision.machine_key()]
    for ph in precision.PHASES:
        cal = precision.Calibration(ph, entry[ph]["fp32_s"], entry[ph]["bf16_s"])
        assert cal.fp32_s > 0 and cal.bf16_s > 0
        assert first[ph] == (cal.speedup >= precision.MARGIN)
    assert precision.cpu_model() in precision.machine_key()


def test_a_corrupt_cache_is_measured_again_and_rewritten(measured, tmp_path):
    (tmp_path / "precision.json").write_text("{not json")
    precision.bf16_for("auto", "play")
    assert measured == ["play"]
    assert precision.machine_key() in json.loads((tmp_path / "precision.json").read_text())


def test_a_cache_that_cannot_be_written_costs_one_measurement_per_process(measured, tmp_path,
                                                                             monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MARS_CACHE_DIR", str(blocker / "cache"))  # under a file: never writable
    first = precision.bf16_for("auto", "update")
    assert precision.bf16_for("auto", "update") == first and measured == ["update"]
    assert not (blocker / "cache").exists()


def test_the_decision_follows_the_measured_speed(monkeypatch, tmp_path):
    """bf16 only when it is at least MARGIN faster: a tie or a small gain stays fp32."""
    monkeypatch.delenv("MARS_BF16_AUTO", raising=False)
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path))
    key = precision.machine_key()
    (tmp_path / "precision.json").write_text(json.dumps({key: {
        "update": {"fp32_s": 1.0, "bf16_s": 0.5}, "play": {"fp32_s": 1.0, "bf16_s": 0.95}}}))
    assert precision.bf16_for("auto", "update") is True
    assert precision.bf16_for("auto", "play") is False


def test_the_override_answers_auto_and_a_bad_one_is_named(monkeypatch):
    monkeypatch.setenv("MARS_BF16_AUTO", "on")
    assert precision.bf16_for("auto", "play") is True
    assert precision.bf16_for("off", "play") is False
    monkeypatch.setenv("MARS_BF16_AUTO", "maybe")
    with pytest.raises(ValueError, match="MARS_BF16_AUTO"):
        precision.bf16_for("auto", "play")
