"""Tic-Tac-Toe exactly: the value of every move of every position under perfect play (negamax
over the 5,478 legal positions), and a position read back from a policy's observation in
either prompt layout. The learning report measures with it what a win rate blurs: how often
the policy's moves are minimax-optimal, above all where some legal move is not (a position
where every move is as good says nothing of skill).

A board is 9 characters, row by row from the top: "X", "O" or "." for an empty cell; X moves
first. A value is the final outcome for the player to move, both sides playing perfectly
after it: 1 a win, 0 a draw, -1 a loss.
"""
from __future__ import annotations

import re
from functools import cache

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
_ROW = re.compile(r"^[XO_]( [XO_]){2}$", re.M)
_LEGAL = re.compile(r"Legal(?: actions)?: (.*)$", re.M)
_MOVE = re.compile(r"<([XO])\((\d),(\d)\)>")


def winner(board: str) -> str | None:
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


@cache
def value(board: str, mark: str) -> int:
    """The outcome for `mark`, to move on `board`, under perfect play (1 win, 0 draw, -1 loss)."""
    values = move_values(board, mark)
    return max(values.values()) if values else 0


@cache
def _move_values(board: str, mark: str) -> tuple[tuple[int, int], ...]:
    if winner(board) is not None:
        return ()
    other = "O" if mark == "X" else "X"
    out = []
    for cell in (i for i, c in enumerate(board) if c == "."):
        after = board[:cell] + mark + board[cell + 1:]
        out.append((cell, 1 if winner(after) == mark else -value(after, other)))
    return tuple(out)


def move_values(board: str, mark: str) -> dict[int, int]:
    """Cell (0-8, row by row) -> the outcome for `mark` after playing it, under perfect play;
    empty where the game is over."""
    return dict(_move_values(board, mark))


def optimal_moves(board: str, mark: str) -> set[int]:
    values = move_values(board, mark)
    best = max(values.values(), default=None)
    return {cell for cell, v in values.items() if v == best}


def read_position(observation: str) -> tuple[str, str] | None:
    """(board, the mark to move) read back from a Tic-Tac-Toe observation in either layout
    (the last three board rows it shows, the mark its legal actions carry), or None when it
    is not one."""
    rows = [m.group(0) for m in _ROW.finditer(observation)]
    legal = _LEGAL.search(observation)
    moves = _MOVE.findall(legal[1]) if legal else []
    if not rows or len(rows) < 3 or not moves:
        return None
    board = "".join(rows[-3:]).replace(" ", "").replace("_", ".")
    return (board, moves[0][0]) if len(board) == 9 else None


def move_cell(action: str) -> int | None:
    """The cell an action such as "<X(1,2)>" names (5), or None."""
    m = _MOVE.search(action or "")
    return 3 * int(m[2]) + int(m[3]) if m and int(m[2]) < 3 and int(m[3]) < 3 else None


def decisive_positions(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """`n` (board, mark to move) positions drawn (by `seed`) from every reachable position of
    the game that is not over and where some legal move is not optimal: the positions the
    capacity probe fits, where the answer depends on the board."""
    import random

    found: set[tuple[str, str]] = set()

    def walk(board: str, mark: str) -> None:
        if (board, mark) in found or winner(board) or "." not in board:
            return
        if len(optimal_moves(board, mark)) < board.count("."):
            found.add((board, mark))
        other = "O" if mark == "X" else "X"
        for cell in (i for i, c in enumerate(board) if c == "."):
            walk(board[:cell] + mark + board[cell + 1:], other)

    walk("." * 9, "X")
    ordered = sorted(found)
    return random.Random(seed).sample(ordered, min(n, len(ordered)))


def held_out_positions(n: int, fitted: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`n` decisive positions (as `decisive_positions`) none of which is in `fitted`, drawn by
    another seed: the positions a probe measures without fitting them (does what it fits carry
    over to positions it never saw?)."""
    seen = set(fitted)
    return [p for p in decisive_positions(10 ** 6, seed=1) if p not in seen][:n]


def moves_to(board: str) -> list[tuple[str, int]]:
    """A move order that reaches `board` from the empty one: (mark, cell), X first, then
    alternating (no earlier position of a position not over is over)."""
    xs = [i for i, c in enumerate(board) if c == "X"]
    os_ = [i for i, c in enumerate(board) if c == "O"]
    order = []
    for k in range(len(xs)):
        order.append(("X", xs[k]))
        if k < len(os_):
            order.append(("O", os_[k]))
    return order
