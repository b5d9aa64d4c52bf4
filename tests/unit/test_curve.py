"""A run's curve read from its finished evaluations (mars_core/strength/curve.py): the
exploitability sentence a finished run ends with, the pictures, the minutes of training."""
from __future__ import annotations

import json

from mars_core.run.commit import MARKER
from mars_core.run.layout import EVALUATE, INIT, METRICS_FILE, TRAIN_STEP, stage_dir, write_episodes
from mars_core.strength import curve
from mars_core.types import Episode


def _evaluation(run, k, exploitability, returns):
    folder = stage_dir(run, k, EVALUATE)
    folder.mkdir(parents=True)
    eps = [Episode(episode_id=f"e{i}", game="kuhn_poker", seed=i,
                   agents=("policy", "bot:random") if i % 2 == 0 else ("bot:random", "policy"),
                   returns=(r, -r) if i % 2 == 0 else (-r, r),
                   outcomes=("win", "loss") if r > 0 else ("loss", "win")) for i, r in
           enumerate(returns)]
    write_episodes(folder, eps)
    (folder / "exploitability_kuhn_poker.json").write_text(json.dumps(
        {"game": "kuhn_poker", "exploitability": exploitability, "policy": {"0": [0.5, 0.5]}}))
    (folder / MARKER).write_text("{}")


def _run(tmp_path):
    run = tmp_path / "demo"
    _evaluation(run, INIT, 0.42, [1, -1, 2, 1])
    _evaluation(run, 0, 0.30, [1, 1, -1, 1])
    _evaluation(run, 1, 0.19, [2, 1, 1, -1])
    for k, s in ((INIT, 60.0), (0, 30.0), (1, 30.0)):
        folder = stage_dir(run, k, TRAIN_STEP)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / METRICS_FILE).write_text(json.dumps({f"time/{TRAIN_STEP}": s}))
    return run


def test_the_exploitability_sentence_names_both_ends_and_how_it_was_trained(tmp_path):
    run = _run(tmp_path)
    line, words = curve.exploitability_words(run, 2, {"kuhn_poker": "self-play"})
    assert line.startswith("kuhn_poker: exploitability 0.420 -> 0.190 after 2 iterations of "
                           "self-play (down 55%; exact")
    assert "uniform play 0.458" in line
    assert words.startswith("what changed (mean over J, Q, K): opening, it bets 50% -> 50%")
    assert curve.exploitability_words(run, 2, {}) and "of training" in curve.exploitability_words(
        run, 2, {})[0]


def test_what_changed_in_words_per_situation_and_whether_the_card_is_read():
    blind = {f"{c}{h}": [0.7, 0.3] for c in "012" for h in ("", "p", "b", "pb")}
    calls = {**blind, **{f"{c}b": [0.1, 0.9] for c in "012"}}  # calls more, whatever the card
    words = curve.kuhn_words(blind, calls)
    assert "facing a bet, it calls 30% -> 90%" in words and "opening, it bets 30% -> 30%" in words
    assert "has not learnt to read its card" in words
    reads = {**blind, "0b": [1.0, 0.0], "2b": [0.0, 1.0]}  # folds J, calls K
    words = curve.kuhn_words(blind, reads)
    assert "its card changes that by up to 100%" in words and "not learnt" not in words


def test_nothing_to_say_before_two_readings(tmp_path):
    run = tmp_path / "demo"
    _evaluation(run, INIT, 0.42, [1, -1])
    assert curve.exploitability_words(run, 2, {"kuhn_poker": "self-play"}) == []
    assert curve.draw_curves(run, 2, tmp_path) == []


def test_the_pictures_are_drawn_and_the_minutes_count_training_only(tmp_path):
    run = _run(tmp_path)
    assert curve.stage_minutes(run, 0) == 1.0 and curve.stage_minutes(run, 2) == 2.0
    drawn = curve.draw_curves(run, 2, tmp_path)
    assert drawn == [curve.LEARNING_CURVE_PNG, curve.EXPLOITABILITY_PNG]
    for name in drawn:
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_the_sentence_names_a_curriculum_s_opponents_in_words():
    from mars_core.config import load_config
    from tasks.strength import trained_against
    from tests.conftest import REPO

    curriculum = "[{opponent: self}, {opponent: 'bot:random', unlock_at: 2}]"
    cfg = load_config(REPO / "configs/demo.yaml", [f"rollout.opponents.kuhn_poker={curriculum}"])
    assert trained_against(cfg.rollout.opponent_pool("kuhn_poker", 0)) == "self-play"
    assert trained_against(cfg.rollout.opponent_pool("kuhn_poker", 3)) == (
        "self-play and play against bot:random")
    assert trained_against([("bot:nash", 1.0)]) == "play against bot:nash"
