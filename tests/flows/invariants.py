"""What every finished training iteration must satisfy, read from its stage folders: the values,
not only that a metric exists (finite numbers, KL >= 0, counts that add up from stage to stage)."""
from __future__ import annotations

import math
from pathlib import Path

from mars_core.run.layout import (ASSIGN_REWARDS, BANK_EPISODES, BUILD_BATCH, BUILD_PLAYERS,
                                  COMPUTE_ADVANTAGES, FILTER_STEPS, GENERATE_ROLLOUTS, METRICS_FILE,
                                  SAVE_CHECKPOINT, TRAIN_STEP, stage_dir)
from mars_core.run.commit import read_json


def stage_metrics(run: Path, k: int, stage: str) -> dict[str, float]:
    return read_json(stage_dir(run, k, stage) / METRICS_FILE)


def _sum(m: dict[str, float], prefix: str, suffix: str = "") -> float:
    return sum(v for key, v in m.items() if key.startswith(prefix) and key.endswith(suffix)
               and "/" not in key[len(prefix):])


def check_iteration(run: Path, k: int, episodes_per_iteration: int) -> None:
    m = {s: stage_metrics(run, k, s) for s in (GENERATE_ROLLOUTS, BUILD_PLAYERS, FILTER_STEPS,
                                                ASSIGN_REWARDS, BANK_EPISODES, BUILD_BATCH,
                                                COMPUTE_ADVANTAGES, TRAIN_STEP, SAVE_CHECKPOINT)}
    for stage, metrics in m.items():
        bad = {key: v for key, v in metrics.items() if not math.isfinite(v)}
        assert not bad, f"iteration {k}, {stage}: values not finite: {bad}"
        times = {key: v for key, v in metrics.items() if key.startswith("time/") and v < 0}
        assert not times, f"iteration {k}, {stage}: negative times {times}"

    roll = m[GENERATE_ROLLOUTS]
    assert roll["rollout/episodes"] == episodes_per_iteration
    assert 0 <= roll["rollout/invalid_action_rate"] <= 1
    assert roll["rollout/generated_tokens"] > 0

    players = m[BUILD_PLAYERS]
    games = {key.split("/")[1] for key in players if key.startswith("players/")}
    for game in games:  # every trainable seat has exactly one outcome
        assert math.isclose(_sum(players, f"players/{game}/", "_rate"), 1.0), (game, players)

    gated = m[FILTER_STEPS]
    assert gated["gated/total"] == _sum(gated, "gated/") - gated["gated/total"]
    assert gated["steps/eligible"] >= 0

    assert all(math.isfinite(v) for v in m[ASSIGN_REWARDS].values())
    bank, batch, adv = m[BANK_EPISODES], m[BUILD_BATCH], m[COMPUTE_ADVANTAGES]
    assert bank["bank/steps_added"] <= gated["steps/eligible"]  # the policy's eligible steps
    assert batch["batch/steps"] == _sum(batch, "batch/game/") == _sum(batch, "batch/role/")
    assert batch["batch/steps"] <= batch["batch/pool_steps"]
    dropped = adv.get("batch/zero_advantage_dropped", 0.0)
    assert adv["batch/samples"] + dropped == batch["batch/steps"]
    assert adv["batch/advantage_std"] >= 0 and adv["batch/advantage_abs_max"] >= 0

    train = m[TRAIN_STEP]
    assert train["train/kl"] >= 0  # k3: exp(r) - 1 - r
    assert train["train/bf16"] in (0.0, 1.0) and "train/train/bf16" not in train  # which precision
    assert train["train/samples"] == adv["batch/samples"]
    assert train["train/grad_norm"] >= 0 and 0 <= train.get("train/clip_frac", 0.0) <= 1
    assert m[SAVE_CHECKPOINT]["checkpoint/size_mb"] > 0
