"""Samplers of an iteration's episodes (In2AI, SPEC section 5 item 6):

- environment: which game each episode plays: round-robin over the games (equal shares), or
  in proportion to weights;
- opponent: who fills the seats the policy does not hold: itself (self-play), a fixed bot, a
  frozen earlier checkpoint of the run, or a curriculum that unlocks stronger opponents at
  iteration thresholds and keeps the earlier ones in the pool with weights;
- position: the policy's seat against an opponent: every seat in turn, or uniform at random
  (roles follow seats; secret roles, as in Mafia, are drawn by the game itself).

Counts are apportioned (largest remainder), not drawn, so a pool's weights hold in every
iteration rather than on average; ties and orders come from a seeded `random.Random`, so a plan
depends only on (seed, iteration). Pure: no files, no models; `tasks/rollout.py` turns the
`frozen` placeholder into a concrete checkpoint.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from mars_core.vocab import FROZEN, SELF
from mars_core.games.registry import make_game
from mars_core.rollout.play import EpisodeSpec
from mars_core.vocab import POLICY


def is_frozen(agent: str) -> bool:
    return agent == FROZEN or agent.startswith(FROZEN + ":")


def apportion(weights: Sequence[tuple[str, float]], n: int, rng: random.Random) -> dict[str, int]:
    """n items split in proportion to the weights: floors first, then one more each to the
    largest remainders (ties in random order). Every key appears, maybe with 0."""
    total = sum(w for _, w in weights)
    if total <= 0:
        raise ValueError("apportion: the weights sum to 0")
    quotas = {k: n * w / total for k, w in weights}
    counts = {k: int(q) for k, q in quotas.items()}
    keys = [k for k, _ in weights]
    rng.shuffle(keys)
    keys.sort(key=lambda k: quotas[k] - counts[k], reverse=True)  # stable: ties stay shuffled
    for k in keys[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


def interleave(counts: dict[str, int], order: Sequence[str]) -> list[str]:
    """Deal the keys round-robin in `order` until every count is used: a, b, a, b, a."""
    left, out = dict(counts), []
    while any(left.values()):
        for k in order:
            if left.get(k, 0) > 0:
                out.append(k)
                left[k] -= 1
    return out


def game_schedule(games: Sequence[str], n: int, weights: dict[str, float],
                  rng: random.Random) -> list[str]:
    """The game of each of n episodes: round-robin, or apportioned by weight (games not named
    weigh 1) and dealt round-robin."""
    if not weights:
        return [games[i % len(games)] for i in range(n)]
    counts = apportion([(g, weights.get(g, 1.0)) for g in games], n, rng)
    return interleave(counts, games)


def plan_episodes(games: Sequence[str], n: int, k: int, seed: int, *,
                  pools: dict[str, list[tuple[str, float]]] | None = None,
                  weights: dict[str, float] | None = None, position: str = "rotate",
                  agent: str = POLICY) -> list[EpisodeSpec]:
    """Iteration k's n episodes. `pools`: game -> unlocked (opponent, weight) pairs (a game not
    named: self-play). In self-play `agent` takes every seat; against an opponent it takes one
    seat (`position`: "rotate" over that game's episodes, or "random") and the opponent the
    others. Ids are unique per iteration and game; episode i plays seed + i."""
    if position not in ("rotate", "random"):
        raise ValueError(f"unknown position sampler {position!r}; choose rotate or random")
    rng = random.Random(seed * 7919 + k)
    schedule = game_schedule(games, n, weights or {}, rng)
    per_game = Counter(schedule)
    queues = {}
    for game, count in per_game.items():
        pool = (pools or {}).get(game) or [(SELF, 1.0)]
        queues[game] = interleave(apportion(pool, count, rng), [o for o, _ in pool])
    against: Counter = Counter()
    specs = []
    for i, game in enumerate(schedule):
        opponent = queues[game].pop(0)
        players = make_game(game).num_players
        if opponent == SELF:
            agents = (agent,) * players
        else:
            seat = against[game] % players if position == "rotate" else rng.randrange(players)
            against[game] += 1
            agents = tuple(agent if p == seat else opponent for p in range(players))
        specs.append(EpisodeSpec(f"it{k:04d}-{game}-{i:04d}", game, seed + i, agents))
    return specs
