"""Three-player iterated Prisoner's Dilemma (SPEC section 5): each round, one free-chat turn per
player, then one decision per player; the third decision resolves the round.

Facts used: steps `{"round": r, "phase": "chat" | "decision"}`, the resolving decision also
`"round_gain": [g0, g1, g2]`; final `scores`, `num_rounds` and `T` (the temptation payoff).
An invalid reply carries no facts: it was a decision when its round already had a decision or
all of its chat turns.

- Players: team = "player_{p}"; graded reward `score / (num_rounds * 2 * T)`.
- Filter: the steps of a round that never resolved are `unfinished_unit`, except the chat
  steps of the player whose invalid decision cut the round off: `depends_on_invalid_step`.
- Rewards: every chat step and the decision of player p in round r get `gain_p(r) / (2 * T)`;
  a step of an unresolved round has no gain (0).
"""
from __future__ import annotations

from mars_core.config import RewardsConfig
from mars_core.postprocess.common import (DEPENDS_ON_INVALID_STEP, UNFINISHED_UNIT,
                                          PlayerResult, apply_gates, apply_rewards,
                                          build_results, error_index, facts)
from mars_core.types import Episode


def rounds(episode: Episode) -> tuple[dict[int, list[tuple[int, int, str]]], dict[int, list]]:
    """Round -> its steps `(turn index, player, phase)`, and round -> gains of resolved rounds."""
    steps: dict[int, list[tuple[int, int, str]]] = {}
    gains: dict[int, list] = {}
    for i, t in enumerate(episode.turns):
        f = facts(t.info)
        if "round" in f:
            steps.setdefault(f["round"], []).append((i, t.player, f["phase"]))
        if "round_gain" in f:
            gains[f["round"]] = f["round_gain"]
    return steps, gains


def invalid_decider(episode: Episode, last_round: list[tuple[int, int, str]]) -> int | None:
    """The seat whose invalid decision ended the game during `last_round`, if any."""
    i = error_index(episode)
    if i is None or not last_round:
        return None
    phases = [phase for _, _, phase in last_round]
    in_decisions = "decision" in phases or phases.count("chat") >= len(episode.agents)
    return episode.turns[i].player if in_decisions else None


def build_players(episode: Episode, cfg: RewardsConfig) -> tuple[PlayerResult, ...]:
    final = facts(episode.info)
    scale = final["num_rounds"] * 2 * final["T"]
    n = len(episode.agents)
    return build_results(episode, [f"player_{p}" for p in range(n)],
                         [final["scores"][p] / scale for p in range(n)])


def filter_steps(episode: Episode, players, cfg: RewardsConfig) -> Episode:
    steps, gains = rounds(episode)
    reasons = {}
    for r, members in steps.items():
        if r in gains:
            continue
        cutter = invalid_decider(episode, members) if r == max(steps) else None
        for i, p, phase in members:
            own_chat = phase == "chat" and p == cutter
            reasons[i] = DEPENDS_ON_INVALID_STEP if own_chat else UNFINISHED_UNIT
    return apply_gates(episode, players, reasons)


def assign_rewards(episode: Episode, players, cfg: RewardsConfig) -> Episode:
    _, gains = rounds(episode)
    two_t = 2 * facts(episode.info)["T"]

    def shaped(i, t) -> float:
        gain = gains.get(facts(t.info).get("round"))
        return gain[t.player] / two_t if gain else 0.0

    return apply_rewards(episode, players, cfg.in2ai, shaped)
