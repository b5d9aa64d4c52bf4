"""Colonel Blotto exactly (the MindGames pipeline's game, `mars_core.games.blotto`): a round's
expected result for an allocation against `bot:random`, and what kind of allocations a policy
plays. What the learning report shows beside the match score for Blotto (bench/learning.py).

`bot:random` allocates by breaking the 20 units at two uniform points (`random_action`: two
draws of 0-20, sorted), so its 441 equally likely draws weigh the 231 allocations unevenly
(the middle ones more). Against it a spread allocation (every field 5 or more, such as
[A7 B7 C6]) wins a round more often than it loses one; a focus allocation (two fields, one
conceded, such as [A10 B10 C0]) about breaks even.
"""
from __future__ import annotations

import functools
import json
import re

from mars_core.games.blotto import UNITS, ColonelBlotto, parse_allocation

GAME = "colonel_blotto"
ROUNDS = ColonelBlotto.env_kwargs["num_rounds"]  # 9; the first to ROUNDS // 2 + 1 wins the match
SPREAD_MIN = 5  # a spread allocation: every field at least this many units


def units(action: str) -> tuple[int, ...] | None:
    """An allocation's units per field (A, B, C), or None when it is not a valid allocation."""
    parsed = parse_allocation(action)
    if parsed.action is None:
        return None
    return tuple(int(u) for u in re.findall(r"\d+", parsed.action))  # canonical: A, B, C


def round_result(mine, theirs) -> int:
    """+1 when `mine` wins more fields than `theirs`, -1 when fewer, 0 on a tie (TextArena's
    rule: a field goes to the larger force, an equal one to nobody)."""
    won = sum(a > b for a, b in zip(mine, theirs))
    lost = sum(a < b for a, b in zip(mine, theirs))
    return (won > lost) - (won < lost)


@functools.cache
def random_allocations() -> tuple[tuple[int, int, int], ...]:
    """`bot:random`'s allocations, one for each of its 441 equally likely draws
    (`ColonelBlotto.random_action`: the units broken at two uniform points)."""
    out = []
    for a in range(UNITS + 1):
        for b in range(UNITS + 1):
            lo, hi = sorted((a, b))
            out.append((lo, hi - lo, UNITS - hi))
    return tuple(out)


@functools.cache
def value_vs_random(allocation: tuple[int, ...]) -> float:
    """A round's expected result (-1 to 1) for `allocation` against `bot:random`, exactly."""
    draws = random_allocations()
    return sum(round_result(allocation, r) for r in draws) / len(draws)


def match_value(win: float, loss: float, tie: float) -> float:
    """A match's expected return (-1 to 1) for a seat whose every round is won, lost or tied
    with these probabilities: the first to win ROUNDS // 2 + 1 rounds wins, else after ROUNDS
    rounds the seat with more rounds won (equal: a draw)."""
    need = ROUNDS // 2 + 1

    @functools.cache
    def value(played: int, mine: int, theirs: int) -> float:
        if mine >= need or theirs >= need or played == ROUNDS:
            return float((mine > theirs) - (mine < theirs))
        return (win * value(played + 1, mine + 1, theirs)
                + loss * value(played + 1, mine, theirs + 1)
                + tie * value(played + 1, mine, theirs))

    return value(0, 0, 0)


def normalized_vs_random(allocation: tuple[int, ...]) -> float:
    """The normalized return (0-100) of playing `allocation` every round against `bot:random`,
    exactly: for a spread one such as [A7 B7 C6] about 87, the room above a policy's score."""
    results = [round_result(allocation, r) for r in random_allocations()]
    n = len(results)
    value = match_value(results.count(1) / n, results.count(-1) / n, results.count(0) / n)
    return 50.0 * (value + 1.0)


@functools.cache
def best_vs_random() -> tuple[tuple[int, ...], float]:
    """(an allocation that scores most when played every round against `bot:random`, its
    normalized return): the ceiling a fixed allocation reaches, [A6 B7 C7] at about 87."""
    allocations = [(a, b, UNITS - a - b) for a in range(UNITS + 1) for b in range(UNITS + 1 - a)]
    best = max(allocations, key=normalized_vs_random)
    return best, normalized_vs_random(best)


def allocation_rates(episodes) -> dict[str, tuple[float, int]]:
    """What the policy allocated in Colonel Blotto, each (share or mean, count): "valid" its
    turns that kept the rules, "spread" its valid allocations with every field at least
    SPREAD_MIN, "value" their mean round result against `bot:random` (exact per allocation),
    "rounds_won" the share of decided rounds the policy's seat won (from the games' final
    facts), and "games_invalid" its games with an invalid turn of its own."""
    counts = {k: [0.0, 0] for k in ("valid", "spread", "value", "rounds_won", "games_invalid")}
    for ep in episodes:
        turns = [t for t in ep.turns if t.game == GAME and t.agent == "policy"]
        if not turns:
            continue
        for t in turns:
            counts["valid"][0] += t.valid
            counts["valid"][1] += 1
            u = units(t.action) if t.valid else None
            if u is None:
                continue
            counts["spread"][0] += min(u) >= SPREAD_MIN
            counts["spread"][1] += 1
            counts["value"][0] += value_vs_random(u)
            counts["value"][1] += 1
        counts["games_invalid"][0] += any(not t.valid for t in turns)
        counts["games_invalid"][1] += 1
        won = json.loads(ep.info or "{}").get("rounds_won")
        seats = [p for p, agent in enumerate(ep.agents) if agent == "policy"]
        if won and len(seats) == 1:
            counts["rounds_won"][0] += won[seats[0]]
            counts["rounds_won"][1] += won[0] + won[1]
    return {k: (total / n, n) for k, (total, n) in counts.items() if n}
