"""TrueSkill ratings (the `trueskill` package, Herbrich et al. 2007) for agents that may hold
several seats of a game, sit in teams, or play free-for-all with three or more sides.

A game is rated as `rate(teams, ranks)`: `teams[t]` lists the agent of every seat on team t
(one seat per agent in a two-player game, both Codenames seats of a side, the Mafia seats of
each camp), `ranks[t]` is the team's place (0 best, equal ranks a tie). TrueSkill's factor
graph models a team's performance as the sum of its seats' performances. An agent that holds
several seats of one game gets the mean of its seats' updates (mu and sigma), so one game
counts once for it, and an agent on both sides of a game (possible in Secret Mafia, where the
camps are drawn in secret) moves by the average of the two. Frozen agents (a reference pool)
enter with their fixed ratings and are never updated.

Defaults are TrueSkill's: mu 25, sigma 25/3, beta sigma/2, tau sigma/100, draw probability
0.10; the conservative rating mu - 3 sigma ranks the leaderboard.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import trueskill

MU, SIGMA = 25.0, 25.0 / 3.0


@dataclass(frozen=True)
class Rating:
    mu: float = MU
    sigma: float = SIGMA

    @property
    def conservative(self) -> float:
        """mu - 3 sigma: the skill the agent has with about 99.9% confidence."""
        return self.mu - 3.0 * self.sigma


@dataclass(frozen=True)
class TrueSkillParams:
    mu: float = MU
    sigma: float = SIGMA
    beta: float = SIGMA / 2.0
    tau: float = SIGMA / 100.0
    draw_probability: float = 0.10

    def __post_init__(self) -> None:
        if self.sigma <= 0 or self.beta <= 0 or self.tau < 0:
            raise ValueError("trueskill: sigma and beta must be positive and tau not negative")
        if not 0.0 <= self.draw_probability < 1.0:
            raise ValueError(f"trueskill: draw_probability must be in [0, 1), got "
                             f"{self.draw_probability}")


class Ratings:
    """The ratings of a set of agents, updated one rated game at a time."""

    def __init__(self, params: TrueSkillParams | None = None,
                 frozen: dict[str, Rating] | None = None) -> None:
        self.params = params or TrueSkillParams()
        p = self.params
        self.env = trueskill.TrueSkill(mu=p.mu, sigma=p.sigma, beta=p.beta, tau=p.tau,
                                       draw_probability=p.draw_probability, backend=None)
        self.frozen = dict(frozen or {})
        self._ratings: dict[str, Rating] = dict(self.frozen)

    def get(self, agent: str) -> Rating:
        return self._ratings.get(agent, Rating(self.params.mu, self.params.sigma))

    def all(self) -> dict[str, Rating]:
        return dict(self._ratings)

    def rate(self, teams: list[list[str]], ranks: list[int]) -> bool:
        """Update the ratings after one game; returns False (and changes nothing) when the game
        says nothing about relative skill: fewer than two teams, or every seat the same agent."""
        if len(teams) != len(ranks):
            raise ValueError(f"{len(teams)} teams but {len(ranks)} ranks")
        if len(teams) < 2 or any(not t for t in teams):
            return False
        if len({a for t in teams for a in t}) < 2:
            return False
        groups = [tuple(self.env.create_rating(self.get(a).mu, self.get(a).sigma) for a in t)
                  for t in teams]
        new = self.env.rate(groups, ranks=ranks)
        moves: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for team, rated in zip(teams, new):
            for agent, r in zip(team, rated):
                moves[agent].append((r.mu, r.sigma))
        for agent, seats in moves.items():
            if agent in self.frozen:
                continue
            self._ratings[agent] = Rating(sum(m for m, _ in seats) / len(seats),
                                          sum(s for _, s in seats) / len(seats))
        return True
