"""Secret Mafia (SPEC section 5): a Village team against a hidden Mafia team; days of
discussion and voting, nights of Mafia kills and the Doctor's and Detective's actions.

Facts used: steps `{"phase", "day", "target", "target_team"}`; final `teams` (per seat) and
`winner` ("Village" | "Mafia" | None).

- Players: team = the seat's team; graded reward 1.0 when its team won, else 0.0 (also when
  a rule error ended the game and the result was never observed).
- Filter: when a rule error ended the game, every step but the error step is
  `outcome_unobserved`.
- Rewards: every step gets `mafia_win` if its team won else `mafia_loss`, plus, for a vote
  (Day-Voting or Night-Mafia) with a target, `mafia_vote_hit` when the target is on the other
  team else `mafia_vote_miss`.
"""
from __future__ import annotations

from mars_core.config import RewardsConfig
from mars_core.postprocess.common import (OUTCOME_UNOBSERVED, PlayerResult, apply_gates,
                                          apply_rewards, build_results, facts)
from mars_core.types import Episode

VOTE_PHASES = ("Day-Voting", "Night-Mafia")


def teams_and_winner(episode: Episode) -> tuple[list[str], str | None]:
    """Each seat's team, and the winning team (None when a rule error ended the game)."""
    final = facts(episode.info)
    return final["teams"], None if episode.error else final.get("winner")


def build_players(episode: Episode, cfg: RewardsConfig) -> tuple[PlayerResult, ...]:
    teams, winner = teams_and_winner(episode)
    return build_results(episode, teams, [float(team == winner) for team in teams])


def filter_steps(episode: Episode, players, cfg: RewardsConfig) -> Episode:
    gated = range(len(episode.turns)) if episode.error else ()
    return apply_gates(episode, players, dict.fromkeys(gated, OUTCOME_UNOBSERVED))


def assign_rewards(episode: Episode, players, cfg: RewardsConfig) -> Episode:
    c = cfg.in2ai
    teams, winner = teams_and_winner(episode)

    def shaped(i, t) -> float:
        team, f = teams[t.player], facts(t.info)
        value = c.mafia_win if team == winner else c.mafia_loss
        if f.get("phase") in VOTE_PHASES and f.get("target") is not None and f.get("target_team"):
            value += c.mafia_vote_hit if f["target_team"] != team else c.mafia_vote_miss
        return value

    return apply_rewards(episode, players, c, shaped)
