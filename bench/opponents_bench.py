"""How long the fixed opponents take per move, and the prompt size of each game. Prints
figures; asserts nothing. This is what decides the cost of the strategic suite on a CPU.

    python bench/opponents_bench.py [--games 4]

1. Seconds per move of each bot (bot:mcts-N for N in 10, 100, 1000, bot:nash, bot:random) in
   the games it fits, from bot-vs-random games (both seats).
2. Tokens of the rules (system) message and of a mid-game observation per game, with the
   embedded model's tokenizer: how much context one turn costs.
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import time

from mars_core.run import offline  # noqa: E402

offline.apply()

from mars_core.strength.suite import suite_specs  # noqa: E402
from mars_core.games.registry import GAMES, make_game  # noqa: E402
from mars_core.rollout.play import play_episodes  # noqa: E402
from mars_core.types import SamplingParams  # noqa: E402

PAIRS = [("tic_tac_toe", "bot:mcts-10"), ("tic_tac_toe", "bot:mcts-100"),
         ("tic_tac_toe", "bot:mcts-1000"), ("connect_four", "bot:mcts-10"),
         ("connect_four", "bot:mcts-100"), ("kuhn_poker", "bot:nash"),
         ("leduc_poker", "bot:nash"), ("simple_hanabi", "bot:random")]


def bot_speed(games: int) -> None:
    print(f"{'game':14s} {'bot':14s} {'moves':>6s} {'s/move':>8s} {'win rate vs random':>19s}")
    for game, bot in PAIRS:
        specs, _ = suite_specs({game: ("bot:random",)}, bot, games, seed=0)
        start = time.perf_counter()
        eps = play_episodes(specs, None, None, SamplingParams(), progress=False)
        seconds = time.perf_counter() - start
        moves = sum(1 for ep in eps for t in ep.turns if t.agent == bot)
        wins = sum(ep.outcomes[ep.agents.index(bot)] == "win" for ep in eps) / len(eps)
        print(f"{game:14s} {bot:14s} {moves:6d} {seconds / max(moves, 1):8.4f} {wins:19.2f}")


def prompt_sizes() -> None:
    from mars_core.models.weights import load_tokenizer, resolve_model

    tok = load_tokenizer(resolve_model("embedded"))
    print(f"\n{'game':14s} {'rules tokens':>12s} {'observation tokens (turn 2)':>28s}")
    for game in GAMES:
        a = make_game(game)
        state = a.new_state(0)
        a.apply(state, sorted(a.legal_actions(state).values())[-1])
        p = a.current_player(state)
        rules = len(tok.encode(a.rules(p)))
        obs = len(tok.encode(a.observation(state, p, [])))
        print(f"{game:14s} {rules:12d} {obs:28d}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--games", type=int, default=4, help="games per seat and pairing")
    args = ap.parse_args()
    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    bot_speed(args.games)
    prompt_sizes()
