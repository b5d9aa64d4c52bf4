"""Who plays whom: round-robin or sampled matches with balanced seats, and the frozen pool's
fixed schedule.

A game's *sides* are the seat groups one agent controls: each seat in a free-for-all game,
each team where teams are fixed (Codenames: red = seats 0 and 1, blue = 2 and 3). Secret
Mafia's camps are drawn in secret, so there every seat is a side.

- round robin: every combination of `sides` distinct agents (when fewer agents than sides,
  each combination is filled by repeating its agents in turn), in every rotation of the
  sides, so each agent plays each side equally often; `n` games per rotation. The games of
  one combination share their seeds across rotations (the same deals in every seat).
- sampled: `matches` draws per game of distinct agents (repeats only when there are fewer
  agents than sides), again in every rotation.

Seeds depend only on the schedule's seed, the game and the match's position, never on who
the agents are, so two newcomers facing the same pool play exactly the same games
(`pool_matches`, with `NEWCOMER` standing for the agent being scored).
"""
from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass
from typing import Callable

from mars_core.games.opponents import check_opponent, is_bot
from mars_core.games.catalog import check_game
from mars_core.games.registry import make_game

NEWCOMER = "<newcomer>"


@dataclass(frozen=True)
class Match:
    match_id: str
    game: str
    seed: int
    agents: tuple[str, ...]  # one per seat


def sides(game: str) -> list[tuple[int, ...]]:
    """The seat groups one agent controls in `game`."""
    adapter = make_game(game)
    if adapter.fixed_teams is None:
        return [(p,) for p in range(adapter.num_players)]
    groups: dict[str, list[int]] = {}
    for p, team in enumerate(adapter.fixed_teams):
        groups.setdefault(team, []).append(p)
    return [tuple(g) for g in groups.values()]


def seats(game: str, side_agents: tuple[str, ...]) -> tuple[str, ...]:
    """The agent of every seat when side i is played by `side_agents[i]`."""
    out = [""] * make_game(game).num_players
    for agent, group in zip(side_agents, sides(game)):
        for p in group:
            out[p] = agent
    return tuple(out)


def fits(agent: str, game: str) -> bool:
    """Models play every game; a bot only the games it fits (no MCTS on poker, ...)."""
    if agent == NEWCOMER or not is_bot(agent):
        return True
    try:
        check_opponent(agent, game)
    except ValueError:
        return False
    return True


def _seed(seed: int, game: str, combo: int, i: int) -> int:
    """A game seed from the schedule position (kept below 2M: bots derive their own seeds as
    `seed * 1000 + seat`, which numpy needs below 2**32)."""
    key = f"{seed}:{game}:{combo}:{i}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % 2_000_000


def _filled(combo: tuple[str, ...], k: int) -> tuple[str, ...]:
    return tuple(combo[i % len(combo)] for i in range(k))


def _rotations(side_agents: tuple[str, ...]) -> list[tuple[str, ...]]:
    k = len(side_agents)
    return [side_agents[r:] + side_agents[:r] for r in range(k)]


def _expand(game: str, combos: list[tuple[str, ...]], n: int, seed: int,
            tag: str) -> list[Match]:
    out = []
    for ci, combo in enumerate(combos):
        for ri, side_agents in enumerate(_rotations(combo)):
            for i in range(n):
                out.append(Match(f"{tag}-{game}-c{ci:03d}-r{ri}-{i:03d}", game,
                                 _seed(seed, game, ci, i), seats(game, side_agents)))
    return out


def check_games(games: list[str]) -> None:
    for g in games:
        check_game(g)
        if make_game(g).cooperative:
            raise ValueError(f"{g} is cooperative (one shared score): the arena rates "
                             "competitive games only")


def _schedule(agents: list[str], games: list[str], n: int, seed: int, tag: str,
              draw: Callable[[str, list[str], int], list[tuple[str, ...]]]) -> list[Match]:
    """Per game: the agents that fit it, `draw(game, players, k)` combinations of k of them
    (k = sides, or fewer agents: then filled by repetition), each in every rotation, n games."""
    check_games(games)
    out: list[Match] = []
    for game in games:
        players = [a for a in agents if fits(a, game)]
        if len(players) < 2:
            continue
        k = len(sides(game))
        combos = [_filled(c, k) for c in draw(game, players, min(k, len(players)))]
        out += _expand(game, combos, n, seed, tag)
    return out


def round_robin(agents: list[str], games: list[str], n: int, seed: int) -> list[Match]:
    """Every combination of agents in every rotation of the sides, `n` games each."""
    return _schedule(agents, games, n, seed, "rr",
                     lambda game, players, k: list(itertools.combinations(players, k)))


def sampled(agents: list[str], games: list[str], matches: int, seed: int) -> list[Match]:
    """`matches` random draws of agents per game (seeded), each played in every rotation."""
    def draw(game: str, players: list[str], k: int) -> list[tuple[str, ...]]:
        rng = random.Random(_seed(seed, game, -1, -1))
        return [tuple(rng.sample(players, k)) for _ in range(matches)]

    return _schedule(agents, games, 1, seed, "sm", draw)


def pool_matches(references: list[str], games: list[str], n: int, seed: int) -> list[Match]:
    """The frozen pool's fixed schedule: in every game, `NEWCOMER` against each combination
    of reference agents filling the other sides, in every rotation, `n` games each. The same
    for every newcomer: substitute it with `with_newcomer`."""
    check_games(games)
    out: list[Match] = []
    for game in games:
        refs = [a for a in references if fits(a, game)]
        k = len(sides(game))
        if not refs:
            continue
        others = [_filled(c, k - 1) for c in itertools.combinations(refs, min(k - 1, len(refs)))]
        out += _expand(game, [(NEWCOMER, *c) for c in others], n, seed, "pool")
    return out


def with_newcomer(matches: list[Match], newcomer: str) -> list[Match]:
    return [Match(m.match_id, m.game, m.seed,
                  tuple(newcomer if a == NEWCOMER else a for a in m.agents)) for m in matches]


def fingerprint(matches: list[Match]) -> str:
    """A short hash of a schedule (ids, games, seeds, seats): equal for two newcomers scored on
    the same games."""
    h = hashlib.sha256()
    for m in matches:
        h.update(f"{m.match_id}|{m.game}|{m.seed}|{','.join(m.agents)};".encode())
    return h.hexdigest()[:16]
