"""What the arena costs besides the model's own sampling: TrueSkill updates per second for
two-player, 2v2 and six-seat games, a whole leaderboard (two rating replays) over N records,
and bot-only matches per second through the real game loop.

    python bench/arena_bench.py [--records 5000] [--matches 40]
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import random
import time

from mars_core.arena.leaderboard import game_record, leaderboard
from mars_core.arena.ratings import Ratings
from mars_core.arena.schedule import round_robin
from mars_core.rollout.play import EpisodeSpec, play_episodes
from mars_core.types import SamplingParams


def _records(n: int, agents: list[str], seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.sample(agents, 2)
        decided = rng.choice(("play", "play", "rule_error", "length"))
        win = rng.random() < 0.5
        out.append({"match_id": f"m{i}", "game": "tic_tac_toe", "agents": [a, b],
                    "teams": ["seat0", "seat1"], "team_order": ["seat0", "seat1"],
                    "ranks": [0, 1] if win else [1, 0],
                    "result": ["win", "loss"] if win else ["loss", "win"],
                    "cause": ["strategy"] * 2, "decided_by": decided,
                    "error_seat": -1 if decided == "play" else (1 if win else 0),
                    "returns": [0.0, 0.0], "turns": 5})
    return out


def bench_updates(n: int) -> None:
    shapes = {"1v1": ([["a"], ["b"]], [0, 1]), "2v2": ([["a", "a"], ["b", "b"]], [0, 1]),
              "3-way": ([["a"], ["b"], ["c"]], [0, 1, 2]),
              "mafia 2v4": ([["a", "b"], ["c", "d", "a", "b"]], [1, 0])}
    for name, (teams, ranks) in shapes.items():
        r = Ratings()
        start = time.perf_counter()
        for _ in range(n):
            r.rate(teams, ranks)
        dt = time.perf_counter() - start
        print(f"trueskill {name:10s}: {n / dt:8.0f} updates/s")


def bench_leaderboard(n: int) -> None:
    agents = [f"agent{i}" for i in range(10)]
    records = _records(n, agents)
    start = time.perf_counter()
    rows = leaderboard(records)
    dt = time.perf_counter() - start
    print(f"leaderboard over {n} records, {len(rows)} agents (all + clean replays): {dt:.2f} s")


def bench_bot_matches(n: int) -> None:
    for game, agents in (("tic_tac_toe", ["bot:random", "bot:mcts-10"]),
                         ("colonel_blotto", ["bot:random", "bot:blotto-focus"]),
                         ("three_player_ipd", ["bot:random", "bot:tit-for-tat",
                                               "bot:always-defect"])):
        matches = round_robin(agents, [game], n, seed=0)
        specs = [EpisodeSpec(m.match_id, m.game, m.seed, m.agents) for m in matches]
        start = time.perf_counter()
        eps = play_episodes(specs, None, None, SamplingParams(), progress=False)
        records = [game_record(m, e) for m, e in zip(matches, eps)]
        dt = time.perf_counter() - start
        print(f"{game:16s}: {len(records)} bot matches in {dt:.2f} s "
              f"({len(records) / dt:.1f} matches/s, attribution included)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--matches", type=int, default=20)
    args = ap.parse_args()
    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    bench_updates(2000)
    bench_leaderboard(args.records)
    bench_bot_matches(args.matches)


if __name__ == "__main__":
    main()
