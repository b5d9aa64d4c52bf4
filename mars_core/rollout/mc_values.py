"""Monte-Carlo action values from cloned game states (issue 45, `rollout.mc_rollouts`).

Every estimator of a batch compares a turn with other turns of its role, in other states; none
measures what the other move in the *same* state would have brought. OpenSpiel states clone
cheaply, so at each policy turn of a training game every legal action is played out
`rollouts` times from a clone of the state, every seat then moving uniformly at random and
chance drawn from the rollout's own seed; an action's value is the mean final return of the
seat to move (VinePPO's values from the state, with a uniform continuation in place of the
policy: no engine call, milliseconds a turn). The live game and its random source are never
touched, so a game plays the same with or without them. Where cards are hidden the playouts
start from the true state; averaged over the deals a seat cannot tell apart, they are the
values of its information state (Kuhn Poker's exact ones: tests/unit/test_mc_values.py).

They measure the move, not the policy: in Tic-Tac-Toe, 16 rollouts an action make the move of
highest value minimax-optimal in 92% of the positions where some move is not (a random move:
40%; bench/mc_values.py). `algorithm.estimator: monte_carlo` trains on them.
"""
from __future__ import annotations

import random

from mars_core.games.base import GameAdapter
from mars_core.games.openspiel_games import OpenSpielGame, _Seeded
# the column's shape lives beside it (mars_core.types); re-exported here for the play loop
from mars_core.types import decode_action_values as decode  # noqa: F401
from mars_core.types import encode_action_values as encode  # noqa: F401


def action_values(adapter: GameAdapter, state, rollouts: int, seed: int) -> dict[str, float]:
    """Each legal action of the seat to move in `state` (its string) -> the mean final return
    of that seat over `rollouts` uniform-random playouts after it. Deterministic in `seed`;
    `state` is left as it was. OpenSpiel games only (a ValueError otherwise)."""
    if not isinstance(adapter, OpenSpielGame):
        raise ValueError(f"Monte-Carlo action values need an OpenSpiel game (cloned states); "
                         f"{adapter.name} is not one")
    if rollouts < 1:
        raise ValueError(f"rollouts must be at least 1, got {rollouts}")
    me = state.s.current_player()
    rng = random.Random(seed)
    out = {}
    for action, action_id in sorted(adapter.legal_actions(state).items(), key=lambda kv: kv[1]):
        total = 0.0
        for _ in range(rollouts):
            s = _Seeded(state.s.clone(), random.Random(rng.getrandbits(64)))
            adapter.apply(s, action_id)
            while not s.s.is_terminal():
                adapter.apply(s, rng.choice(s.s.legal_actions()))
            total += s.s.returns()[me]
        out[action] = total / rollouts
    return out
