"""Colonel Blotto (SPEC section 5): one allocation per commander per round; a round is scored
when both have allocated.

Facts used: a step's `round`, and on the allocation that resolved its round `round_result`
(`[seat 0, seat 1]`, each "win" | "loss" | "tie"); final `rounds_won` and `rounds_needed`.

- Players: team = role ("alpha" / "beta"); graded reward `min(1, rounds_won / rounds_needed)`.
- Filter: an allocation whose round was never resolved depends on the invalid reply that
  ended the game when an opponent gave it (`depends_on_invalid_step`), else it is an
  `unfinished_unit`; resolved rounds keep their steps.
- Rewards: both allocations of a round get the round's result for their commander
  (`blotto_round_win` / `_tie` / `_loss`); an unresolved allocation has no result (0).
"""
from __future__ import annotations

from mars_core.config import RewardsConfig
from mars_core.postprocess.common import (DEPENDS_ON_INVALID_STEP, UNFINISHED_UNIT,
                                          PlayerResult, apply_gates, apply_rewards,
                                          build_results, facts, first_role)
from mars_core.types import Episode


def round_results(episode: Episode) -> dict[int, list[str]]:
    """Round -> `[result of seat 0, result of seat 1]` for every resolved round."""
    out = {}
    for t in episode.turns:
        f = facts(t.info)
        if "round_result" in f:
            out[f["round"]] = f["round_result"]
    return out


def build_players(episode: Episode, cfg: RewardsConfig) -> tuple[PlayerResult, ...]:
    final = facts(episode.info)
    won, needed = final["rounds_won"], final["rounds_needed"]
    teams = [first_role(episode, p) for p in range(len(episode.agents))]
    return build_results(episode, teams, [min(1.0, w / needed) for w in won])


def filter_steps(episode: Episode, players, cfg: RewardsConfig) -> Episode:
    resolved = round_results(episode)
    reasons = {}
    for i, t in enumerate(episode.turns):
        f = facts(t.info)
        if "round" in f and f["round"] not in resolved:
            cut_by_other = episode.error_player not in (-1, t.player)
            reasons[i] = DEPENDS_ON_INVALID_STEP if cut_by_other else UNFINISHED_UNIT
    return apply_gates(episode, players, reasons)


def assign_rewards(episode: Episode, players, cfg: RewardsConfig) -> Episode:
    c = cfg.in2ai
    value = {"win": c.blotto_round_win, "tie": c.blotto_round_tie, "loss": c.blotto_round_loss}
    resolved = round_results(episode)

    def shaped(i, t) -> float:
        result = resolved.get(facts(t.info).get("round"))
        return value[result[t.player]] if result else 0.0

    return apply_rewards(episode, players, c, shaped)
