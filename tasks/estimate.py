"""How long a training run has left, estimated before it starts from this machine's precision
calibration (`mars_core.models.precision`: seconds per call of a SmolLM2-shaped block, for the
update and for play, in fp32 and in bf16).

A run's work is counted in units of each kind: warm-up examples (update), the warm-up's probe
games, the evaluations' games and exploitability readings (play), each iteration's games
(play) and its update (update: per game, or per pass over its rows). The seconds a unit took were
measured once per shape, on the reference machine of `REFERENCES`, together with that
machine's block times; here each kind of work is scaled by this machine's block time for the
precision the run uses over the reference's. So a CPU whose calibration is 5x slower gets an
estimate 5x longer, and a run half done gets half. It is rough, and it knows only the
measured shapes (the embedded model on Tic-Tac-Toe alone in the papers' layout, the demo's
Kuhn Poker self-play in the compact one; a few dozen games an iteration): a run of another
shape gets no line (a Kuhn Poker recipe of 256 games an update was told 9 h for a run of
about 1 h, a Tic-Tac-Toe one 16 h 43 min for about 3 h: games of other lengths, prompts and
batches cost other time), and other load on the machine is not foreseen.
"""
from __future__ import annotations

import os
from pathlib import Path

from mars_core.models import precision
from mars_core.run.layout import EVALUATE, INIT, PREPARE_POLICY, SAVE_CHECKPOINT, stage_dir
from mars_core.run.commit import is_done

# The measured shapes: each one's stages on the reference machine (AMD EPYC with AVX512-BF16,
# 2 cores, the machine otherwise idle, bf16 chosen for both phases) and that machine's block
# times then; seconds per unit of work.
# - tic_tac_toe (`make demo` before 2026-12-02; configs/learning/tic_tac_toe.yaml's shape):
#   the warm-up 159.4 s for 12 x 8 examples and 8 probe games, an evaluation 15.8-18.8 s for
#   20 games, rollouts 21.7-26.0 s for 8 games, the update and the stages after the rollouts
#   31.1-35.6 s (2026-11-28, 7 min 29 s for the whole command).
# - kuhn_poker (`make demo`: configs/demo.yaml): measured 2026-12-02 with 5 iterations, 8
#   passes an update and 50 games a seat (10 min 22 s for the whole command, a fresh cache):
#   the conversion 21.6 s, the warm-up and its probes 78.7 s, an evaluation 12.7-18.7 s for 100
#   games and the exploitability, rollouts 11.9-14.6 s for 64 games, an update 55.0-67.3 s for
#   8 passes, the stages between 6 s; 27 s for the rest (the process, its servers, the end).
REFERENCES = {
    "tic_tac_toe": {
        "cpu": "an AMD EPYC with AVX512-BF16",
        "block_s": {"update": 0.00936, "play": 0.000784},
        "warmup_example": 1.59,  # update
        "probe_game": 0.865,  # play
        "eval_game": 0.865,  # play
        "rollout_game": 3.01,  # play
        "update_game": 4.18,  # update
    },
    "kuhn_poker": {
        "cpu": "an AMD EPYC with AVX512-BF16",
        "block_s": {"update": 0.00569, "play": 0.000523},
        "conversion": 21.6,  # update (the GGUF dequantized, once per machine)
        "start": 27.0,  # update (the process, Prefect, MLflow, the final stages)
        "warmup_example": 0.74,  # update
        "probe_game": 0.5,  # play
        "eval_game": 0.124,  # play
        "exploitability_read": 2.5,  # play
        "rollout_game": 0.21,  # play
        "update_epoch": 7.6,  # update (one pass of the mirror update over its rows)
        "iteration_stages": 6.0,  # update (the stages between the rollouts and the update)
    },
}
REFERENCE = REFERENCES["tic_tac_toe"]


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
    read = cfg.evaluation.exploitability and "kuhn_poker" in suite
    left = n - done_iters
    return {"conversion": float(warm and _unconverted(cfg)), "start": float(bool(left or evals)),
            "warmup_example": warm * cfg.warmup.steps * cfg.warmup.batch_size,
            "probe_game": warm * 2 * cfg.warmup.probe_games,
            "eval_game": evals * games_per_eval, "exploitability_read": evals * read,
            "rollout_game": games, "update_game": games,
            "update_epoch": left * cfg.algorithm.ppo_epochs, "iteration_stages": left}


def _unconverted(cfg) -> bool:
    """Whether the run starts by converting the embedded model (not yet in the cache)."""
    from mars_core.models.weights import EMBEDDED_DIRNAME, MARKER, default_cache_dir

    return cfg.model.path == "embedded" and not (
        default_cache_dir() / EMBEDDED_DIRNAME / MARKER).is_file()


PHASE = {"conversion": "update", "start": "update", "warmup_example": "update",
         "probe_game": "play", "eval_game": "play", "exploitability_read": "play",
         "rollout_game": "play", "update_game": "update", "update_epoch": "update",
         "iteration_stages": "update"}


def estimate_s(work: dict[str, float], block_s: dict[str, float],
               reference: dict = REFERENCE) -> float:
    """Seconds for `work` on a machine whose block times are `block_s` (per phase); a kind of
    work the reference does not price costs nothing in its shape (a Tic-Tac-Toe update is
    priced per game, a Kuhn Poker one per pass over its rows)."""
    return sum(units * reference[kind] * block_s[PHASE[kind]] / reference["block_s"][PHASE[kind]]
               for kind, units in work.items() if kind in reference)


def duration(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


# the most games an iteration of a measured shape plays: more fill the engine's batches and
# share each update's passes, so a game costs far less than the demo's did (the Tic-Tac-Toe
# greedy recipe, 256 games in the compact layout, was told 16 h 43 min for about 3 h)
MEASURED_GAMES = {"tic_tac_toe": 32, "kuhn_poker": 64}
LAYOUT = {"tic_tac_toe": "paper", "kuhn_poker": "compact"}


def measured_shape(cfg) -> str | None:
    """The measured shape the run has, or None: the embedded model on one game alone, in
    the layout it was measured in, a few dozen games an iteration at most (Kuhn Poker: the
    mirror update, priced per iteration)."""
    games = tuple(cfg.rollout.games)
    if cfg.model.path != "embedded" or len(games) != 1 or games[0] not in REFERENCES:
        return None
    game = games[0]
    if (cfg.rollout.prompt != LAYOUT[game]
            or cfg.rollout.episodes_per_iteration > MEASURED_GAMES[game]
            or (game == "kuhn_poker") != (cfg.algorithm.train_actions == "mirror")):
        return None
    return game


def _plan(cfg, run_dir: Path) -> tuple[dict, dict, dict, dict] | None:
    """(reference, work left, block seconds, precision chosen) per phase, or None where there is
    nothing to estimate (a CUDA device, the test suite's MARS_BF16_AUTO, a finished run, a run of
    another shape than the measured ones)."""
    import torch

    shape = measured_shape(cfg)
    if torch.cuda.is_available() or os.environ.get("MARS_BF16_AUTO") or shape is None:
        return None
    work = remaining_work(cfg, run_dir)
    if not any(work.values()):
        return None
    block, chosen = {}, {}
    for phase in precision.PHASES:
        block[phase], bf16 = _block_s(cfg.model.bf16, phase)
        chosen[phase] = "bf16" if bf16 else "fp32"
    return REFERENCES[shape], work, block, chosen


def calibrate_before_servers(cfg) -> None:
    """Measure this machine's calibration (once per machine: it is cached) before the run's
    servers start, where the estimate and `model.bf16: auto` will read it. Measured at the
    flow's start, beside Prefect's temporary server and MLflow setting up on the same 2 cores,
    the update's block read 13.1 ms where it reads 8.7-9.2 ms alone (AMD EPYC, 2026-12-03):
    the demo was told 13 min for 7 min 21 s; alone, 9 min."""
    import torch

    wanted = measured_shape(cfg) is not None or cfg.model.bf16 == "auto"
    if not wanted or torch.cuda.is_available() or os.environ.get("MARS_BF16_AUTO"):
        return
    for phase in precision.PHASES:
        precision.calibration(phase)


def estimate_line(cfg, run_dir: Path) -> str | None:
    """One line: the time the run has left on this CPU and the calibration it comes from; None
    where there is nothing to estimate (`_plan`)."""
    plan = _plan(cfg, run_dir)
    if plan is None:
        return None
    reference, work, block, chosen = plan
    speed = " ".join(f"{phase} {chosen[phase]} {reference['block_s'][phase] / block[phase]:.2f}x"
                     for phase in precision.PHASES)
    return (f"estimate: about {duration(estimate_s(work, block, reference))} to go on this CPU "
            f"(its calibration against {reference['cpu']}, where this shape was measured: "
            f"{speed}; rough, more under other load)")


# the work of the first stage (prepare_policy): the conversion, the warm-up and its probe games
WARMUP_WORK = ("conversion", "warmup_example", "probe_game")
RESCALE = (0.25, 4.0)  # the most the warm-up's own pace moves the estimate of the rest


def warmup_seconds(cfg, run_dir: Path) -> float | None:
    """The seconds the estimate gives the first stage, before it runs; None where there is no
    estimate or no such stage left (a resumed run)."""
    plan = _plan(cfg, run_dir)
    if plan is None:
        return None
    reference, work, block, _ = plan
    s = estimate_s({k: work[k] for k in WARMUP_WORK}, block, reference)
    return s if s > 0 else None


def refined_line(cfg, run_dir: Path, expected_s: float, took_s: float) -> str | None:
    """After the first stage: the rest of the run priced again at the pace that stage ran
    (`took_s` against the `expected_s` estimated), which is this machine's speed now, not the
    calibration block's. The block can misjudge it: on one day it read 2.7x slower than the
    reference while the run itself went 2x slower (docs/getting-started.md)."""
    plan = _plan(cfg, run_dir)
    if plan is None or expected_s <= 0:
        return None
    reference, work, block, _ = plan
    pace = min(max(took_s / expected_s, RESCALE[0]), RESCALE[1])
    rest = estimate_s(work, block, reference) * pace
    return (f"estimate: about {duration(rest)} to go (the warm-up took {took_s:.0f} s where "
            f"{expected_s:.0f} s were estimated: the rest of the run is priced at that pace)")
