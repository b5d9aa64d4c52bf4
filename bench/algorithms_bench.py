"""What the training-algorithm stages cost: each advantage estimator (vectorised and its loop
twin) on a batch of turns, the batch builder on banks of growing size, and the memory a
reference model takes (what `algorithm.kl_coef: 0` saves).

    python bench/algorithms_bench.py [--turns 100000] [--bank 200000]
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import time

import numpy as np
import polars as pl

from mars_core.types import encode_action_values

from mars_core.advantages import estimators as adv
from mars_core.batching.builder import build_batch


def twins() -> dict:
    """Each estimator's loop twin, as its record names it (None: the record names none)."""
    return {name: e.twin() if e.twin else None for name, e in adv.ESTIMATORS.items()}


def turns(n: int, seed: int = 0) -> pl.DataFrame:
    """n turns: 3 games, 2 roles, episodes of 4-12 turns alternating roles, random rewards; for
    `monte_carlo`, each turn's move among 3 with random values (1 in 10 invalid)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 13, size=n // 4)
    ep = np.repeat(np.arange(len(lengths)), lengths)[:n]
    turn = np.concatenate([np.arange(k) for k in lengths])[:n]
    games = np.array(["tic_tac_toe", "kuhn_poker", "colonel_blotto"])[ep % 3]
    valid = rng.random(len(ep)) > 0.1
    move = rng.integers(0, 3, size=len(ep))
    values = np.round(rng.normal(size=(len(ep), 3)), 3)
    return pl.DataFrame({"episode_id": [f"e{e}" for e in ep], "game": games,
                         "player": turn % 2, "role": [f"player_{t % 2}" for t in turn],
                         "turn": turn,
                         "reward": np.round(rng.normal(size=len(ep)), 3),
                         "action": [f"<m{m}>" if ok else "" for m, ok in zip(move, valid)],
                         "valid": valid, "game_reward": np.where(valid, 0.0, -1.0),
                         "action_values": [encode_action_values({f"<m{j}>": float(v)
                                                                  for j, v in enumerate(row)})
                                           for row in values]})


def _time(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--bank", type=int, default=200_000)
    ap.add_argument("--twin-turns", type=int, default=2_000)
    args = ap.parse_args()
    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    df, small = turns(args.turns), turns(args.twin_turns)
    print(f"estimators on {args.turns:,} turns (vectorised) and {args.twin_turns:,} (loop twin):")
    for name, twin in twins().items():
        t = _time(lambda: adv.compute_advantages(df, name))
        loop = f"{_time(lambda: twin(small), 1) * 1000:8.1f} ms" if twin else "(no twin)"
        print(f"  {name:16s} {t * 1000:8.1f} ms   loop twin {loop}")
    print("batch builder (seconds per batch; steps in the bank, units drawn):")
    for n in (args.bank // 20, args.bank // 4, args.bank):
        bank = turns(n, 1).with_columns(pl.format("{}/{}", "episode_id", "turn").alias("turn_id"))
        for unit, size in (("turn", 768), ("trajectory", 128)):
            t = _time(lambda: build_batch(bank, unit=unit, size=size, seed=0,
                                          max_turns_per_episode=4, reward_bins=3), 1)
            print(f"  bank {n:>8,} steps, {unit:10s} x{size:4d}: {t:6.2f} s")
    try:
        from mars_core.models.weights import load_model, resolve_model

        model = load_model(resolve_model("embedded"))
        mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
        print(f"reference model (embedded SmolLM2-135M, fp32): {mb:.0f} MiB not loaded with "
              "kl_coef 0")
    except Exception as e:  # the embedded model is optional for this bench
        print(f"reference model size: skipped ({e})")


if __name__ == "__main__":
    main()
