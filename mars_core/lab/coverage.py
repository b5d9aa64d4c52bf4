"""How many Tic-Tac-Toe positions a policy must be taught before it scores what issue 45 asks
(85 against `bot:random`, 35 against `bot:mcts-10`), if it learns positions as separate facts.

The capacity probe's held-out positions found that it does: fitting 24 decisive positions to
0.93 left 48 others at the uniform move's 0.41 (docs/lab.md). This module takes that finding as
its model of the policy: a *table policy* that plays an optimal move (uniformly among the
optimal ones, minimax labels as the probe's) in the positions of a fitted set, and a uniformly
random legal move everywhere else (the start policy, 41% optimal where it matters, is as good
as uniform there; invalid replies are left out). It then grows the fitted set greedily and
reports after each round:

- the exact normalized score (0-100) against `bot:random`, both seats averaged: every game
  path is enumerated, nothing is sampled;
- the score against `bot:mcts-10` (OpenSpiel's MCTS as `games.bots` builds it) from sampled
  games, with its 95% half-width;
- which share of the policy's decisions where the move matters fall in the fitted set.

The next round's positions are the unfitted decisive positions the policy reaches most often
against both opponents (exact reach probabilities against `bot:random`, plus visit
frequencies in the sampled MCTS games): the order a learner meeting positions by play would
meet them most. Or (`order="gain"`) those whose fitting would raise the exact score against
`bot:random` most: a curriculum that knew the answer, near the fewest positions for that score.
"""
from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

from mars_core.lab.tictactoe import optimal_moves, winner

Position = tuple[str, str]  # (board, the mark to move), as lab.tictactoe's
EMPTY = "." * 9


def _mark(board: str) -> str:
    return "X" if board.count("X") == board.count("O") else "O"


def _outcome(board: str, seat: str) -> float | None:
    """The seat's score (1 win, 0.5 draw, 0 loss) where the game is over, else None."""
    w = winner(board)
    if w is not None:
        return 1.0 if w == seat else 0.0
    return 0.5 if "." not in board else None


# which moves a fitted position is taught: "minimax" the optimal ones under perfect play (the
# probe's labels); "random_best" those of highest expected score against a uniformly random
# opponent, playing so to the end (the best response to `bot:random`: the labels that serve
# the score against it best, where minimax's are indifferent, e.g. the opening)
LABELS = ("minimax", "random_best")


@cache
def _random_best_value(board: str, seat: str) -> Fraction:
    """`seat`'s expected score from `board` on, playing the best response to a uniformly random
    opponent (exact: fractions, so ties are ties)."""
    out = _outcome(board, seat)
    if out is not None:
        return Fraction(out)
    mark = _mark(board)
    values = [_random_best_value(board[:m] + mark + board[m + 1:], seat)
              for m, c in enumerate(board) if c == "."]
    return max(values) if mark == seat else sum(values) / len(values)


@cache
def label_moves(board: str, mark: str, labels: str = "minimax") -> frozenset[int]:
    """The moves a fitted position is taught under `labels`."""
    if labels == "minimax":
        return frozenset(optimal_moves(board, mark))
    values = {m: _random_best_value(board[:m] + mark + board[m + 1:], mark)
              for m, c in enumerate(board) if c == "."}
    top = max(values.values())
    return frozenset(m for m, v in values.items() if v == top)


def decisive(board: str, mark: str, labels: str = "minimax") -> bool:
    """Some legal move is not a labelled one: the move matters (the probe's positions, under
    minimax labels)."""
    return len(label_moves(board, mark, labels)) < board.count(".")


def policy_moves(board: str, mark: str, fitted: set[Position] | frozenset,
                 labels: str = "minimax") -> list[int]:
    """The table policy's moves, each equally likely: the labelled ones where fitted, else
    every legal one."""
    if (board, mark) in fitted:
        return sorted(label_moves(board, mark, labels))
    return [i for i, c in enumerate(board) if c == "."]


def exact_vs_random(fitted: Iterable[Position],
                    labels: str = "minimax") -> tuple[float, dict[Position, float]]:
    """(the table policy's expected normalized score against a uniformly random opponent, both
    seats averaged, 0-100; the probability that the policy decides in each decisive position,
    summed over the two seats, so that a position's weight is its expected visits per pair of
    games). Exact: every game path is weighed by its probability."""
    fitted = frozenset(fitted)
    score, reach = 0.0, defaultdict(float)
    for seat in ("X", "O"):
        layer = {EMPTY: 1.0}
        while layer:
            nxt: dict[str, float] = defaultdict(float)
            for board, p in layer.items():
                out = _outcome(board, seat)
                if out is not None:
                    score += p * out / 2
                    continue
                mark = _mark(board)
                if mark == seat:
                    moves = policy_moves(board, mark, fitted, labels)
                    if decisive(board, mark, labels):
                        reach[(board, mark)] += p
                else:
                    moves = [i for i, c in enumerate(board) if c == "."]
                for cell in moves:
                    nxt[board[:cell] + mark + board[cell + 1:]] += p / len(moves)
            layer = nxt
    return 100.0 * score, dict(reach)


def sampled_vs_mcts(fitted: Iterable[Position], games_per_seat: int, simulations: int = 10,
                    seed: int = 0, labels: str = "minimax") -> tuple[float, float, Counter]:
    """(the table policy's mean normalized score against OpenSpiel's MCTS with `simulations`
    simulations, as `bot:mcts-N` plays it, over `games_per_seat` games a seat; its 95%
    half-width; how often the policy decided in each decisive position)."""
    import numpy as np
    import pyspiel
    from open_spiel.python.algorithms import mcts

    fitted = frozenset(fitted)
    game = pyspiel.load_game("tic_tac_toe")
    rng = random.Random(seed)
    bot_rng = np.random.RandomState(seed)
    bot = mcts.MCTSBot(game, uct_c=2.0, max_simulations=simulations,
                       evaluator=mcts.RandomRolloutEvaluator(n_rollouts=10, random_state=bot_rng),
                       random_state=bot_rng)
    scores, visits = [], Counter()
    for seat in ("X", "O"):
        for _ in range(games_per_seat):
            state, board = game.new_initial_state(), EMPTY
            while (out := _outcome(board, seat)) is None:
                mark = _mark(board)
                if mark == seat:
                    if decisive(board, mark, labels):
                        visits[(board, mark)] += 1
                    cell = rng.choice(policy_moves(board, mark, fitted, labels))
                else:
                    cell = int(bot.step(state))
                state.apply_action(cell)  # OpenSpiel's action is the cell, row by row
                board = board[:cell] + mark + board[cell + 1:]
            scores.append(100.0 * out)
    n = len(scores)
    mean = sum(scores) / n
    var = sum((s - mean) ** 2 for s in scores) / (n - 1)
    return mean, 1.96 * (var / n) ** 0.5, visits


def gains_vs_random(fitted: Iterable[Position], labels: str = "minimax") -> dict[Position, float]:
    """For each decisive position the table policy reaches and has not fitted: how many
    normalized points (0-100, both seats averaged) its exact score against a random opponent
    would gain by fitting that position alone, the rest of its play unchanged: the position's
    reach times the gap between its labelled moves' and its uniform move's expected outcome."""
    fitted = frozenset(fitted)
    _, reach = exact_vs_random(fitted, labels)
    memo: dict[tuple[str, str], float] = {}

    def outcome(board: str, seat: str) -> float:
        """The seat's expected score from `board` on, the table policy against random."""
        if (board, seat) not in memo:
            out = _outcome(board, seat)
            if out is None:
                mark = _mark(board)
                moves = (policy_moves(board, mark, fitted, labels) if mark == seat
                         else [i for i, c in enumerate(board) if c == "."])
                out = sum(outcome(board[:m] + mark + board[m + 1:], seat)
                          for m in moves) / len(moves)
            memo[(board, seat)] = out
        return memo[(board, seat)]

    gains = {}
    for (board, mark), p in reach.items():
        if (board, mark) in fitted:
            continue
        after = {m: outcome(board[:m] + mark + board[m + 1:], mark)
                 for m in (i for i, c in enumerate(board) if c == ".")}
        best = label_moves(board, mark, labels)
        gap = sum(after[m] for m in best) / len(best) - sum(after.values()) / len(after)
        gains[(board, mark)] = 100.0 * p * gap / 2
    return gains


@dataclass(frozen=True)
class Round:
    positions: int  # fitted positions after this round
    vs_random: float  # exact, 0-100
    vs_mcts: float  # sampled, 0-100
    vs_mcts_ci95: float
    covered: float  # share of the policy's decisive decisions (both opponents) in the fitted set


def _covered(fitted: frozenset, weights: dict[Position, float]) -> float:
    total = sum(weights.values())
    return sum(w for p, w in weights.items() if p in fitted) / total if total else 1.0


ORDERS = ("visits", "gain")


def curve(step: int = 25, limit: int | None = None, games_per_seat: int = 200,
          seed: int = 0, until: tuple[float, float] | None = (85.0, 35.0),
          order: str = "visits", labels: str = "minimax") -> list[Round]:
    """Grow the fitted set `step` positions a round from none; stop when both scores reach
    `until` (vs `bot:random`, vs `bot:mcts-10`), when the set holds `limit` positions, or when
    no unfitted decisive position is reached any more. The first round is the empty set (the
    start). `order` "visits": the positions reached most often first (against both opponents);
    "gain": those whose fitting alone would raise the exact score against `bot:random` most
    (`gains_vs_random`): a curriculum that knew the answer, greedy round by round, so near
    (not proven) the fewest positions for that score a learner of separate facts could need.
    `labels`: what a fitted position is taught (`LABELS`)."""
    if step < 1 or games_per_seat < 2:
        raise ValueError("coverage: step must be >= 1 and games_per_seat >= 2")
    if order not in ORDERS:
        raise ValueError(f"coverage: order {order!r} is not one of {', '.join(ORDERS)}")
    if labels not in LABELS:
        raise ValueError(f"coverage: labels {labels!r} is not one of {', '.join(LABELS)}")
    fitted: frozenset[Position] = frozenset()
    rounds = []
    while True:
        vs_random, reach = exact_vs_random(fitted, labels)
        vs_mcts, ci, visits = sampled_vs_mcts(fitted, games_per_seat, seed=seed + len(rounds),
                                              labels=labels)
        # a position's weight: expected visits per pair of games against each opponent
        weights = defaultdict(float, reach)
        for p, v in visits.items():
            weights[p] += v / games_per_seat
        rounds.append(Round(len(fitted), vs_random, vs_mcts, ci, _covered(fitted, weights)))
        done = until is not None and vs_random >= until[0] and vs_mcts >= until[1]
        if order == "gain":
            weights = defaultdict(float, gains_vs_random(fitted, labels))
        todo = sorted((p for p in weights if p not in fitted and weights[p] > 0),
                      key=lambda p: (-weights[p], p))
        if done or not todo or (limit is not None and len(fitted) >= limit):
            return rounds
        room = step if limit is None else min(step, limit - len(fitted))
        fitted = fitted | frozenset(todo[:room])
