"""Batches the estimator tests share: small hand-checked tables and seeded random turns."""
from __future__ import annotations


import numpy as np
import polars as pl

from mars_core.types import encode_action_values

COLUMNS = ["episode_id", "game", "player", "role", "turn", "reward"]
EPS = 1e-6


def frame(rows: list[tuple]) -> pl.DataFrame:
    """Rows of (episode_id, game, role, turn, reward), each role held by one seat: `player` is
    the role's index among the sorted roles."""
    roles = sorted({r[2] for r in rows})
    return pl.DataFrame([(e, g, roles.index(r), r, t, w) for e, g, r, t, w in rows],
                        schema=COLUMNS, orient="row")


def tic_tac_toe() -> pl.DataFrame:
    """Two Tic-Tac-Toe games. e1: player_0 wins on move 4 (player_1's loss is credited to its
    own last turn, move 3). e2: player_1 wins on move 5. +0.05 per valid move."""
    return frame([
        ("e1", "tic_tac_toe", "player_0", 0, 0.05),
        ("e1", "tic_tac_toe", "player_1", 1, 0.05),
        ("e1", "tic_tac_toe", "player_0", 2, 0.05),
        ("e1", "tic_tac_toe", "player_1", 3, -0.95),
        ("e1", "tic_tac_toe", "player_0", 4, 1.05),
        ("e2", "tic_tac_toe", "player_0", 0, 0.05),
        ("e2", "tic_tac_toe", "player_1", 1, 0.05),
        ("e2", "tic_tac_toe", "player_0", 2, 0.05),
        ("e2", "tic_tac_toe", "player_1", 3, 0.05),
        ("e2", "tic_tac_toe", "player_0", 4, -0.95),
        ("e2", "tic_tac_toe", "player_1", 5, 1.05),
    ])


# Returns-to-go G_k of the table above, row by row (worked out by hand):
# e1 p0: 1.15, 1.10, 1.05   e1 p1: -0.90, -0.95
# e2 p0: -0.85, -0.90, -0.95   e2 p1: 1.15, 1.10, 1.05
TTT_RETURNS = [1.15, -0.90, 1.10, -0.95, 1.05, -0.85, 1.15, -0.90, 1.10, -0.95, 1.05]
# player_0 mean G = (3.30 - 2.70) / 6 = 0.10; player_1 mean G = (3.30 - 1.85) / 5 = 0.29
TTT_MARS = [1.05, -1.19, 1.00, -1.24, 0.95, -0.95, 0.86, -1.00, 0.81, -1.05, 0.76]


def random_turns(seed: int, n_episodes: int = 12, ties: bool = False) -> pl.DataFrame:
    """A random batch: 2 games, 2 roles, 1-7 moves per episode, non-contiguous turns within a
    trajectory, rows shuffled, plus an extra unique column `note` that must survive. `ties`:
    rewards in {-1, 0, 1}, so many returns-to-go coincide (mars_code's distinct values)."""
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(n_episodes):
        game = ["tic_tac_toe", "kuhn_poker"][int(rng.integers(2))]
        for t in range(int(rng.integers(1, 8))):
            role = f"player_{int(rng.integers(2))}"
            reward = float(rng.integers(-1, 2)) if ties else float(np.round(rng.normal(), 3))
            rows.append((f"ep{e}", game, role, t, reward))
    rows = [rows[i] for i in rng.permutation(len(rows))]
    return frame(rows).with_columns(pl.Series("note", [f"row{i}" for i in range(len(rows))]),
                                    *_mc_columns(seed, len(rows), ties))


def _mc_columns(seed: int, n: int, ties: bool) -> list[pl.Series]:
    """The columns `monte_carlo` reads, from their own random stream (the other columns stay as
    they were): an action, whether it was valid, its game reward, and the Monte-Carlo values of
    0-4 actions (none on some turns; an invalid turn's action is not among them)."""
    rng = np.random.default_rng(seed + 10_000)
    actions, valid, values, game = [], [], [], []
    for _ in range(n):
        k = int(rng.integers(0, 5))
        measured = {f"<a{j}>": float(rng.integers(-1, 2)) if ties else float(np.round(rng.normal(), 3))
                    for j in range(k)}
        ok = bool(rng.random() < 0.8)
        action = f"<a{int(rng.integers(0, max(k, 1)))}>" if ok else ""
        actions.append(action)
        valid.append(ok)
        game.append(float(rng.integers(-1, 2)))
        values.append(encode_action_values(measured) if measured else "")
    return [pl.Series("action", actions), pl.Series("valid", valid),
            pl.Series("game_reward", game), pl.Series("action_values", values)]


# ------------------------------------------------------------------------------ MARS

# RAE's baseline keys
P0, P1, KUHN = "tic_tac_toe|player_0", "tic_tac_toe|player_1", "kuhn_poker|player_0"
