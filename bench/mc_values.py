"""What Monte-Carlo action values from cloned states (`rollout.mc_rollouts`) are worth, and
what they cost: in Tic-Tac-Toe positions where some legal move is not minimax-optimal, how
often the move of highest value is optimal (beside a random move's share in the same
positions), and the milliseconds a turn, per number of rollouts.

    python bench/mc_values.py [--positions 400] [--rollouts 4,16,64]
"""
from __future__ import annotations

import argparse
import time

from mars_core.games.registry import make_game
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


if __name__ == "__main__":
    main()
