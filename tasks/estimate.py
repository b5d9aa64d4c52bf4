"""How long a training run has left, estimated before it starts from this machine's precision
calibration (`mars_core.models.precision`: seconds per call of a SmolLM2-shaped block, for the
update and for play, in fp32 and in bf16).

A run's work is counted in units of each kind: warm-up examples (update), the warm-up's probe
games and the evaluations' games (play), each iteration's games (play) and its update. The
seconds a unit took were measured once, on the reference machine of `REFERENCE`, together with
that machine's block times; here each kind of work is scaled by this machine's block time
for the precision the run uses over the reference's. So a CPU whose calibration is 5x slower
gets an estimate 5x longer, and a run half done gets half. It is rough, and it knows only the
demo preset's shape (the embedded model, Tic-Tac-Toe alone): a run of another shape gets no
line (a Kuhn Poker recipe of 256 games an update was told 9 h for a run of about 1 h, a
Tic-Tac-Toe one 16 h 43 min for about 3 h: games of other lengths, prompts and batches cost
other time), and other load on the machine is not foreseen.
"""
from __future__ import annotations

import os
from pathlib import Path

from mars_core.models import precision
from mars_core.run.layout import EVALUATE, INIT, PREPARE_POLICY, SAVE_CHECKPOINT, stage_dir
from mars_core.run.commit import is_done

# `make demo`'s stages (the warm-up, two evaluations of 20 games, four iterations of 8 games),
# measured on an AMD EPYC with AVX512-BF16, 2 cores, the machine otherwise idle, bf16 chosen
# for both phases (2026-11-28, 7 min 29 s for the whole command), and that machine's block
# times (bf16). Seconds per unit: warm-up 159.4 s for 12 x 8 examples and 8 probe games, an
# evaluation 15.8-18.8 s for 20 games, rollouts 21.7-26.0 s for 8 games, the update and the
# stages after the rollouts 31.1-35.6 s. (The reference before it, an Intel Xeon with AMX under
# load 6-10, told this machine 22 min.)
REFERENCE = {
    "cpu": "an AMD EPYC with AVX512-BF16",
    "block_s": {"update": 0.00936, "play": 0.000784},
    "warmup_example": 1.59,  # update
    "probe_game": 0.865,  # play
    "eval_game": 0.865,  # play
    "rollout_game": 3.01,  # play
    "update_game": 4.18,  # update
}


def _block_s(setting: str, phase: str) -> tuple[float, bool]:
    """This machine's seconds per block for the phase at the precision the run takes, and
    whether that is bf16."""
    cal = precision.calibration(phase)
    bf16 = setting == "on" or (setting == "auto" and cal.bf16)
    return (cal.bf16_s if bf16 else cal.fp32_s), bf16


def remaining_work(cfg, run_dir: Path) -> dict[str, float]:
    """The units of work the run has left, from its config and its finished stages."""
    run_dir = Path(run_dir)
    n = cfg.run.iterations
    done_iters = sum(is_done(stage_dir(run_dir, k, SAVE_CHECKPOINT)) for k in range(n))
    warm = not is_done(stage_dir(run_dir, INIT, PREPARE_POLICY))
    every = cfg.evaluation.every
    points = [k for k in range(n) if every and ((k + 1) % every == 0 or k + 1 == n)]
    evals = sum(not is_done(stage_dir(run_dir, k, EVALUATE)) for k in points)
    if every and cfg.evaluation.at_start:
        evals += not is_done(stage_dir(run_dir, INIT, EVALUATE))
    suite = cfg.evaluation.suite(cfg.rollout.games)
    games_per_eval = 2 * cfg.evaluation.games_per_seat * sum(len(o) for o in suite.values())
    games = cfg.rollout.episodes_per_iteration * (n - done_iters)
    return {"warmup_example": warm * cfg.warmup.steps * cfg.warmup.batch_size,
            "probe_game": warm * 2 * cfg.warmup.probe_games,
            "eval_game": evals * games_per_eval,
            "rollout_game": games, "update_game": games}


PHASE = {"warmup_example": "update", "probe_game": "play", "eval_game": "play",
         "rollout_game": "play", "update_game": "update"}


def estimate_s(work: dict[str, float], block_s: dict[str, float],
               reference: dict = REFERENCE) -> float:
    """Seconds for `work` on a machine whose block times are `block_s` (per phase)."""
    return sum(units * reference[kind] * block_s[PHASE[kind]] / reference["block_s"][PHASE[kind]]
               for kind, units in work.items())


def duration(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


# the most games an iteration of the measured shape plays: more fill the engine's batches
# and share each update's passes, so a game costs far less than the demo's 8 did (the Tic-Tac-Toe
# greedy recipe, 256 games in the compact layout, was told 16 h 43 min for about 3 h)
MEASURED_GAMES = 32


def measured_shape(cfg) -> bool:
    """Whether the run has the shape the reference measured: the embedded model on
    Tic-Tac-Toe alone, in the papers' prompt layout, a few dozen games an iteration at most."""
    return (cfg.model.path == "embedded" and tuple(cfg.rollout.games) == ("tic_tac_toe",)
            and cfg.rollout.prompt == "paper"
            and cfg.rollout.episodes_per_iteration <= MEASURED_GAMES)


def estimate_line(cfg, run_dir: Path) -> str | None:
    """One line: the time the run has left on this CPU and the calibration it comes from; None
    where there is nothing to estimate (a CUDA device, the test suite's MARS_BF16_AUTO, a
    finished run, a run of another shape than the demo's)."""
    import torch

    if torch.cuda.is_available() or os.environ.get("MARS_BF16_AUTO") or not measured_shape(cfg):
        return None
    work = remaining_work(cfg, run_dir)
    if not any(work.values()):
        return None
    block, chosen = {}, {}
    for phase in precision.PHASES:
        block[phase], bf16 = _block_s(cfg.model.bf16, phase)
        chosen[phase] = "bf16" if bf16 else "fp32"
    speed = " ".join(f"{phase} {chosen[phase]} {REFERENCE['block_s'][phase] / block[phase]:.2f}x"
                     for phase in precision.PHASES)
    return (f"estimate: about {duration(estimate_s(work, block))} to go on this CPU (its "
            f"calibration against {REFERENCE['cpu']}, where the demo was measured: {speed}; "
            f"rough, more under other load)")
