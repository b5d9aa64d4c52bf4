"""Numbers and text made from episodes: per-iteration rollout metrics and readable transcripts."""
from __future__ import annotations

from mars_core.types import Episode


def rollout_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Outcome rates per seat (win/draw/loss/invalid), the invalid-action rate per model turn
    and the mean reply length in tokens."""
    out: dict[str, float] = {"episodes": float(len(episodes))}
    if not episodes:
        return out
    seats = max(len(ep.agents) for ep in episodes)
    for seat in range(seats):
        eps = [ep for ep in episodes if seat < len(ep.outcomes)]
        for name in ("win", "draw", "loss", "invalid"):
            out[f"seat{seat}_{name}_rate"] = sum(ep.outcomes[seat] == name for ep in eps) / len(eps)
    model_turns = [t for ep in episodes for t in ep.turns if t.agent == "policy"]
    if model_turns:
        out["invalid_action_rate"] = sum(not t.valid for t in model_turns) / len(model_turns)
        out["mean_reply_tokens"] = sum(len(t.completion_ids) for t in model_turns) / len(model_turns)
        out["model_turns"] = float(len(model_turns))
    out["mean_episode_turns"] = sum(len(ep.turns) for ep in episodes) / len(episodes)
    out["error_episode_rate"] = sum(bool(ep.error) for ep in episodes) / len(episodes)
    return out


def transcript(ep: Episode) -> str:
    """A Markdown account of one game: every turn's observation and the full reply."""
    lines = [f"## {ep.episode_id} ({ep.game}, seed {ep.seed})",
             f"agents: {', '.join(ep.agents)}; returns: {list(ep.returns)}; "
             f"outcomes: {list(ep.outcomes)}" + (f"; error: {ep.error} by seat {ep.error_player}"
                                                 if ep.error else ""), ""]
    for t in ep.turns:
        status = "valid" if t.valid else f"INVALID ({t.error}: {t.error_detail})"
        if t.gate_reason:
            status += f", not trained ({t.gate_reason})"
        lines += [f"### turn {t.turn}: seat {t.player} ({t.role}, {t.agent}), {status}, "
                  f"reward {t.reward:+.3f}", "", "```", t.observation, "```", "reply:", "```",
                  t.reply, "```", ""]
    return "\n".join(lines)
