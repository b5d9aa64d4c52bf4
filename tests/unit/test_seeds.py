"""A run's random streams: each decision draws from its own, and the values stay those of the
runs made before the streams had names (the rollouts, the update, the batch, the deals)."""
from __future__ import annotations

from mars_core.run.seeds import Stream, stream_seed


def _old(seed: int, *parts: int) -> int:  # the derivation before the streams had names
    for p in parts:
        seed = (seed * 1_000_003 + p) % (2**31 - 1)
    return seed


def test_named_streams_keep_their_values():
    for k in range(5):
        assert stream_seed(42, Stream.ROLLOUTS, k) == _old(42, k, 1)
        assert stream_seed(42, Stream.TRAINING, k) == _old(42, k, 4)
        assert stream_seed(42, Stream.BATCHING, k) == _old(42, k, 5)
    assert stream_seed(42, Stream.EVALUATION_DEALS) == _old(42, 7)
    assert stream_seed(42, Stream.WARMUP, 0) == _old(42, 0, 9)


def test_no_two_decisions_share_a_stream():
    # the batch drawn at iteration k and the evaluation sampled after k steps used to be one
    for k in range(1, 50):
        assert stream_seed(0, Stream.BATCHING, k) != stream_seed(0, Stream.EVALUATION_SAMPLING, k)
    seeds = {(s, k): stream_seed(7, s, k) for s in Stream for k in range(100)}
    assert len(set(seeds.values())) == len(seeds)
