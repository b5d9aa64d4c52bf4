"""Codenames (SPEC section 5): two teams (red, blue) of a spymaster, who gives a clue
`[word N]`, and an operative, who guesses words or passes.

Facts used: steps `{"kind": "clue", "team", "number"}`, `{"kind": "guess", "team", "label"}`
(label "own" | "opponent" | "neutral" | "assassin") and `{"kind": "pass", "team"}`; final
`teams` (per seat), `team_words` and `found` (per team). A clue group is a clue and the
guesses/pass of the same team that follow it; an invalid reply (no facts) of that team's
operative right after belongs to the group.

- Players: team = "red" / "blue"; graded reward `found[team] / team_words[team]`, shared.
- Filter: a group containing an invalid guess: its clue and valid guesses
  `depends_on_invalid_step`; a clue nobody answered: `unfinished_unit`.
- Rewards: a guess is worth its label's value (a pass `codenames_pass`); every guess/pass of a
  group gets the group's average; the clue gets `min(correct, N) / max(N, 1)` with correct =
  own-word guesses, or `codenames_assassin` when the group hit the assassin.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mars_core.config import In2AIRewards, RewardsConfig
from mars_core.postprocess.common import (DEPENDS_ON_INVALID_STEP, UNFINISHED_UNIT,
                                          PlayerResult, apply_gates, apply_rewards,
                                          build_results, facts, is_error_step)
from mars_core.types import Episode


@dataclass
class ClueGroup:
    clue: int  # turn index of the clue
    team: str
    giver: int  # the spymaster's seat
    number: int
    answers: list[int] = field(default_factory=list)  # turn indices of valid guesses/passes
    labels: list[str] = field(default_factory=list)  # "pass" for a pass
    invalid: bool = False  # an invalid reply of the operative ended the game in this group


def clue_groups(episode: Episode) -> list[ClueGroup]:
    teams = facts(episode.info)["teams"]
    groups: list[ClueGroup] = []
    for i, t in enumerate(episode.turns):
        f = facts(t.info)
        group = groups[-1] if groups else None
        if f.get("kind") == "clue":
            groups.append(ClueGroup(i, f["team"], t.player, f["number"]))
        elif group and f.get("kind") in ("guess", "pass") and f["team"] == group.team:
            group.answers.append(i)
            group.labels.append(f.get("label", "pass"))
        elif group and is_error_step(t) and teams[t.player] == group.team \
                and t.player != group.giver:
            group.invalid = True
    return groups


def build_players(episode: Episode, cfg: RewardsConfig) -> tuple[PlayerResult, ...]:
    final = facts(episode.info)
    teams = final["teams"]
    graded = [final["found"][team] / final["team_words"][team] for team in teams]
    return build_results(episode, teams, graded)


def filter_steps(episode: Episode, players, cfg: RewardsConfig) -> Episode:
    reasons = {}
    for g in clue_groups(episode):
        if g.invalid:
            reasons.update(dict.fromkeys([g.clue, *g.answers], DEPENDS_ON_INVALID_STEP))
        elif not g.answers:
            reasons[g.clue] = UNFINISHED_UNIT
    return apply_gates(episode, players, reasons)


def group_values(g: ClueGroup, c: In2AIRewards) -> dict[int, float]:
    """Turn index -> shaped value for the clue and the answers of one group."""
    worth = {"own": c.codenames_own, "neutral": c.codenames_neutral,
             "opponent": c.codenames_opponent, "assassin": c.codenames_assassin,
             "pass": c.codenames_pass}
    values = [worth[label] for label in g.labels]
    average = sum(values) / len(values) if values else 0.0
    correct = g.labels.count("own")
    clue = (c.codenames_assassin if "assassin" in g.labels
            else min(correct, g.number) / max(g.number, 1))
    return {g.clue: clue} | dict.fromkeys(g.answers, average)


def assign_rewards(episode: Episode, players, cfg: RewardsConfig) -> Episode:
    shaped: dict[int, float] = {}
    for g in clue_groups(episode):
        shaped |= group_values(g, cfg.in2ai)
    return apply_rewards(episode, players, cfg.in2ai, lambda i, t: shaped.get(i, 0.0))
