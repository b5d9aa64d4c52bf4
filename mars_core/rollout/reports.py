"""Numbers and text made from episodes: per-iteration rollout metrics and readable transcripts."""
from __future__ import annotations

from mars_core.types import Episode
from mars_core.vocab import POLICY, Outcome


def rollout_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Outcome rates per seat (win/draw/loss/invalid), the invalid-action rate per model turn
    and the mean reply length in tokens."""
    out: dict[str, float] = {"episodes": float(len(episodes))}
    if not episodes:
        return out
    seats = max(len(ep.agents) for ep in episodes)
    for seat in range(seats):
        eps = [ep for ep in episodes if seat < len(ep.outcomes)]
        for name in (Outcome.WIN, Outcome.DRAW, Outcome.LOSS, Outcome.INVALID):
            out[f"seat{seat}_{name}_rate"] = sum(ep.outcomes[seat] == name for ep in eps) / len(eps)
    model_turns = [t for ep in episodes for t in ep.turns if t.agent == POLICY]
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


def learning_curve_plot(rows: list[dict], steps: dict[str, tuple[int, float]], path,
                        title: str = "") -> None:
    """The learning curve of a run, per (game, opponent) against the iteration each policy was
    evaluated after (0: the start policy; top axis: minutes of training so far): its
    normalized return with the 95% band, the paired difference to the start policy on the same
    deals with its 95% band (what a verdict rests on), and the invalid-reply rate. `rows` are
    `evaluation.paired_rows` against the start policy; `steps` maps a row's policy label to
    (iteration, minutes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted({(r["game"], r["opponent"]) for r in rows})
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(7, 8), sharex=True,
                                              gridspec_kw={"height_ratios": [3, 2, 1]})

    def band(ax, x, y, ci, **kw):
        line, = ax.plot(x, y, marker="o", **kw)
        ax.fill_between(x, [a - b for a, b in zip(y, ci)], [a + b for a, b in zip(y, ci)],
                        color=line.get_color(), alpha=0.2)
        return line.get_color()

    for game, opponent in cells:
        mine = sorted((r for r in rows if (r["game"], r["opponent"]) == (game, opponent)),
                      key=lambda r: steps[r["policy"]][0])
        x = [steps[r["policy"]][0] for r in mine]
        color = band(top, x, [r["normalized_return"] for r in mine], [r["ci95"] for r in mine],
                     label=f"{game} vs {opponent}")
        band(middle, x, [r["diff"] for r in mine], [r["diff_ci95"] for r in mine], color=color)
        bottom.plot(x, [100 * r["invalid_rate"] for r in mine], marker=".", color=color)
    top.set_ylabel("normalized return (0-100)")
    top.legend(fontsize=8)
    top.set_title(title or "learning curve (95% bands)")
    middle.axhline(0.0, color="grey", linewidth=0.8)
    middle.set_ylabel("vs start, paired")
    bottom.set_ylabel("invalid replies %")
    bottom.set_xlabel("iterations trained")
    for ax in (top, middle, bottom):
        ax.grid(alpha=0.3)
    ticks = sorted(set(steps.values()))
    secondary = top.secondary_xaxis("top")
    secondary.set_xticks([k for k, _ in ticks], [f"{m:.0f} min" for _, m in ticks], fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def exploitability_plot(exp: dict[str, dict[str, dict]], steps: dict, path: Path,
                        title: str) -> bool:
    """Exploitability against minutes of training, one line per game; False when none."""
    games = sorted({g for by in exp.values() for g in by})
    if not games:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for game in games:
        pts = [(steps[label][1], by[game]["exploitability"]) for label, by in exp.items()
               if game in by]
        ax.plot(*zip(*pts), marker="o", label=game)
    ax.set_xlabel("minutes of training (warm-up, rollouts, updates)")
    ax.set_ylabel("exploitability (NashConv / 2)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
