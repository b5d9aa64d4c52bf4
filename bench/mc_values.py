"""What Monte-Carlo action values from cloned states (`rollout.mc_rollouts`) are worth, and
what they cost: in Tic-Tac-Toe positions where some legal move is not minimax-optimal, how
often the move of highest value is optimal (beside a random move's share in the same
positions), and the milliseconds a turn, per number of rollouts. With `--games N`, also how
strong a player is that always plays the best-valued move (what `algorithm.train_actions:
best_valued` distils into the policy: its labels' ceiling), N games a seat against bot:random
and bot:mcts-10, in the evaluation's normalized return (0-100).

    python bench/mc_values.py [--positions 400] [--rollouts 4,16,64] [--games 100]
"""
from __future__ import annotations

import argparse
import time

from mars_core.games.bots import make_bot
from mars_core.games.registry import make_game
from mars_core.stats.intervals import mean_ci95
from mars_core.lab import tictactoe
from mars_core.models.precision import cpu_model
from mars_core.rollout import mc_values


def _state(adapter, board: str):
    state = adapter.new_state(0)
    for _, cell in tictactoe.moves_to(board):
        adapter.apply(state, cell)
    return state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=400)
    ap.add_argument("--rollouts", default="4,16,64")
    ap.add_argument("--games", type=int, default=0,
                    help="games a seat for the best-valued player against each bot (0: none)")
    args = ap.parse_args()
    adapter = make_game("tic_tac_toe")
    positions = tictactoe.decisive_positions(args.positions, seed=0)
    states = [_state(adapter, board) for board, _ in positions]
    chance = sum(len(tictactoe.optimal_moves(b, m)) / len(tictactoe.move_values(b, m))
                 for b, m in positions) / len(positions)
    print(f"Tic-Tac-Toe, {len(positions)} positions where some move is not optimal "
          f"({cpu_model()}); a random move is optimal in "
          f"{chance:.1%} of them")
    print("| rollouts a move | best-valued move optimal | ms a turn |")
    print("|---:|---:|---:|")
    for n in (int(x) for x in args.rollouts.split(",")):
        right, start = 0, time.perf_counter()
        for i, ((board, mark), state) in enumerate(zip(positions, states)):
            values = mc_values.action_values(adapter, state, n, seed=i)
            best = tictactoe.move_cell(max(values, key=values.get))
            right += best in tictactoe.optimal_moves(board, mark)
        ms = (time.perf_counter() - start) / len(positions) * 1000
        print(f"| {n} | {right / len(positions):.1%} | {ms:.1f} |")
    if args.games:
        print(f"\nThe best-valued move's player, {args.games} games a seat (normalized return "
              "0-100, 95% interval):")
        print("| rollouts a move | vs bot:random | vs bot:mcts-10 |")
        print("|---:|---:|---:|")
        for n in (int(x) for x in args.rollouts.split(",")):
            cells = [_strength(adapter, n, bot, args.games)
                     for bot in ("bot:random", "bot:mcts-10")]
            print(f"| {n} | " + " | ".join(f"{m:.1f} ± {ci:.1f}" for m, ci in cells) + " |")


def _strength(adapter, rollouts: int, bot_spec: str, games: int) -> tuple[float, float]:
    """The best-valued player's normalized return against `bot_spec` over `games` a seat."""
    scores = []
    for seat in (0, 1):
        for g in range(games):
            seed = 1000 * seat + g
            state, bot = adapter.new_state(seed), make_bot(bot_spec, adapter, seed)
            while not state.s.is_terminal():
                if state.s.current_player() == seat:
                    values = mc_values.action_values(adapter, state, rollouts, seed=seed + len(
                        state.s.history()))
                    adapter.apply(state, adapter.legal_actions(state)[max(values, key=values.get)])
                else:
                    move = bot.act(adapter, state)
                    adapter.apply(state, move if isinstance(move, int)
                                  else adapter.legal_actions(state)[move])
            scores.append(100.0 * (state.s.returns()[seat] + 1) / 2)
    return mean_ci95(scores, (0.0, 100.0))


if __name__ == "__main__":
    main()
