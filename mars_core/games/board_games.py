"""Board games: Tic-Tac-Toe and Connect Four, rendered as grids of X, O and _."""
from __future__ import annotations

from mars_core.games.openspiel_games import OpenSpielGame


class _Board(OpenSpielGame):
    """What both board games share: marks X (seat 0, moves first) and O, the observation
    (the opponent's move, the board, the legal actions), a forfeit of -1 and the draw bonus."""

    draw_bonus = True
    MARKS = ("X", "O")

    def board(self, state) -> str:
        raise NotImplementedError

    def observation(self, state, player: int, moves_since: list[tuple[int, str]]) -> str:
        lines = [f"Opponent ({self.MARKS[p]}) played {a}." for p, a in moves_since]
        lines += [
            "Current board:",
            self.board(state),
            f"You are {self.MARKS[player]}. Legal actions: "
            + ", ".join(self.legal_actions(state)),
            "Answer with exactly one of them inside <answer></answer> tags.",
        ]
        return "\n".join(lines)

    def compact_observation(self, state, player: int, moves_since: list[tuple[int, str]]) -> str:
        """The legal actions, then the board last (next to the answer)."""
        return "\n".join([f"You are {self.MARKS[player]}. Legal: "
                          + " ".join(self.legal_actions(state)), "Board:", self.board(state)])

    def _compact_answer(self, player: int, example: str) -> str:
        order = "first" if player == 0 else "second"
        return (f"You are {self.MARKS[player]} ({order} to move); the opponent is "
                f"{self.MARKS[1 - player]}. Empty cells are _. Answer with one legal action in "
                f"answer tags, e.g. <answer><{self.MARKS[player]}{example}></answer>. A bad "
                "answer loses.")

    def forfeit_return(self, state, player: int) -> float:
        return -1.0


class TicTacToe(_Board):
    name = "tic_tac_toe"
    pyspiel_name = "tic_tac_toe"

    def action_string(self, state, player: int, action_id: int) -> str:
        row, col = divmod(action_id, 3)
        return f"<{self.MARKS[player]}({row},{col})>"

    def board(self, state) -> str:
        rows = str(state.s).strip().splitlines()
        return "\n".join(" ".join("_" if c == "." else c.upper() for c in r) for r in rows)

    def compact_rules(self, player: int) -> str:
        return ("Tic-Tac-Toe on a 3x3 board; three marks in a row, column or diagonal win. "
                "Cells are (row,col), 0 to 2, row 0 on top.\n"
                + self._compact_answer(player, "(1,1)"))

    def rules(self, player: int) -> str:
        me, other = self.MARKS[player], self.MARKS[1 - player]
        order = "You move first." if player == 0 else "Your opponent moves first."
        return (
            f"You are playing Tic-Tac-Toe as {me}; your opponent plays {other}. {order}\n"
            "The board is a 3x3 grid. Players take turns placing their mark in an empty cell "
            "(shown as _). The first player with three marks in a row, column or diagonal wins; "
            "a full board with no such line is a draw.\n"
            "Cells are named (row,col) with row and col from 0 to 2; row 0 is the top row and "
            "column 0 the left column. An action is written with your mark, for example "
            f"<{me}(1,1)> places {me} in the centre.\n"
            "Reply with your reasoning if you like, then exactly one legal action inside answer "
            f"tags, for example <answer><{me}(0,2)></answer>, and nothing after it. An illegal "
            "or malformed answer loses the game."
        )


class ConnectFour(_Board):
    """Connect Four on OpenSpiel's 6x7 board; an action names only the column (0..6, which
    is also OpenSpiel's action id), since the piece falls to the lowest empty cell."""

    name = "connect_four"
    pyspiel_name = "connect_four"
    COLUMNS = 7

    def action_string(self, state, player: int, action_id: int) -> str:
        return f"<{self.MARKS[player]}({action_id})>"

    def board(self, state) -> str:
        """The grid top row first (as OpenSpiel prints it), under a column-number header so
        the model can read off which column each cell is in."""
        rows = str(state.s).strip().splitlines()
        grid = [" ".join("_" if c == "." else c.upper() for c in r) for r in rows]
        return "\n".join([" ".join(str(c) for c in range(self.COLUMNS)), *grid])

    def compact_rules(self, player: int) -> str:
        return ("Connect Four: 6 rows, 7 columns numbered 0 to 6 (the header line); a piece "
                "falls to the lowest empty cell of its column. Four in a line wins.\n"
                + self._compact_answer(player, "(3)"))

    def rules(self, player: int) -> str:
        me, other = self.MARKS[player], self.MARKS[1 - player]
        order = "You move first." if player == 0 else "Your opponent moves first."
        return (
            f"You are playing Connect Four as {me}; your opponent plays {other}. {order}\n"
            "The board has 6 rows and 7 columns; empty cells are shown as _. Players take turns "
            "dropping one of their pieces into a column that is not full: the piece falls to the "
            "lowest empty cell of that column. The first player with four pieces in a line "
            "(horizontal, vertical or diagonal) wins; a full board with no such line is a draw.\n"
            "Columns are numbered 0 to 6 from left to right, as in the header line above the "
            "board; the top line of the board is the top row and pieces stack up from the "
            "bottom line. An action is written with your mark and a column, for example "
            f"<{me}(3)> drops {me} into the middle column.\n"
            "Reply with your reasoning if you like, then exactly one legal action inside answer "
            f"tags, for example <answer><{me}(3)></answer>, and nothing after it. An illegal "
            "or malformed answer loses the game."
        )

