"""What the MindGames games cost without a model: bot episodes per second, turns per episode,
the Action Validator's and the post-episode stages' time per step, and prompt sizes.

    python bench/textarena_bench.py [--episodes 40]
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import statistics
import time

from mars_core import postprocess as pp
from mars_core.config import RewardsConfig
from mars_core.games.opponents import MINDGAMES_OPPONENTS
from mars_core.games.base import format_answer
from mars_core.games.catalog import MINDGAMES
from mars_core.games.registry import make_game
from mars_core.rollout.play import EpisodeSpec, play_episodes
from mars_core.types import SamplingParams
from mars_core.rollout.validator import validate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=40)
    args = ap.parse_args()
    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    cfg = RewardsConfig()
    for game in MINDGAMES:  # import textarena (about 5 s) before timing anything
        make_game(game).new_state(0)
    print(f"{'game':17s} {'bots':20s} {'ep/s':>6s} {'turns/ep':>8s} {'validate us':>11s} "
          f"{'post us/step':>12s} {'obs chars':>9s}")
    for game in MINDGAMES:
        n = make_game(game).num_players
        for bot in ("bot:random", *MINDGAMES_OPPONENTS[game][1:]):
            specs = [EpisodeSpec(f"b{i}", game, i, (bot,) * n) for i in range(args.episodes)]
            start = time.perf_counter()
            episodes = play_episodes(specs, None, None, SamplingParams(), progress=False)
            seconds = time.perf_counter() - start
            turns = [t for ep in episodes for t in ep.turns]
            start = time.perf_counter()
            for ep in episodes:
                players = pp.build_players(ep, cfg)
                pp.assign_rewards(pp.filter_steps(ep, players, cfg), players, cfg)
            post = (time.perf_counter() - start) / len(turns) * 1e6
            print(f"{game:17s} {bot:20s} {len(episodes) / seconds:6.1f} "
                  f"{len(turns) / len(episodes):8.1f} {_validate_us(game):11.1f} {post:12.1f} "
                  f"{statistics.mean(len(t.observation) for t in turns):9.0f}")


def _validate_us(game: str, n: int = 2000) -> float:
    """Microseconds per validated reply (a valid one and a malformed one, alternating)."""
    import random

    adapter = make_game(game)
    state = adapter.new_state(0)
    replies = [format_answer(adapter.random_action(state, random.Random(0))), "no answer here"]
    start = time.perf_counter()
    for i in range(n):
        validate(adapter, state, replies[i % 2])
    return (time.perf_counter() - start) / n * 1e6


if __name__ == "__main__":
    main()
