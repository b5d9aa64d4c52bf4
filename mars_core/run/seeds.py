"""A run's random streams, one per decision that draws, each derived from `run.seed`.

Naming them keeps two decisions from sharing one stream by accident (the batch draw of
iteration k and the evaluation sampling after k steps once did); a resumed run draws the same.
"""
from __future__ import annotations

from enum import IntEnum, unique


@unique
class Stream(IntEnum):
    ROLLOUTS = 1  # an iteration's episode plan and its sampling
    TRAINING = 4  # the update's minibatch order and dropout
    BATCHING = 5  # the training batch drawn from the bank
    EVALUATION_DEALS = 7  # the evaluation's deals: the same at every step, so steps pair up
    EVALUATION_SAMPLING = 8  # the evaluation's sampling at a step
    WARMUP = 9  # the format warm-up's examples and its probe games


def stream_seed(run_seed: int, stream: Stream, k: int | None = None) -> int:
    """The seed of `stream` (at iteration or step `k`, where it changes with it)."""
    seed = run_seed
    for part in ((stream,) if k is None else (k, stream)):
        seed = (seed * 1_000_003 + int(part)) % (2**31 - 1)
    return seed
