"""The ratings plot: a training run's checkpoints in iteration order (mu with a ±3 sigma bar,
the conservative rating marked), beside the other agents as horizontal reference lines."""
from __future__ import annotations

from pathlib import Path


def ratings_plot(rows: list[dict], checkpoints: list[tuple[str, int]], path: Path,
                 title: str = "") -> None:
    """`rows`: leaderboard rows; `checkpoints`: (agent label, training iteration) pairs of the
    run's checkpoints (may be empty: then every agent is a reference line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_agent = {r["agent"]: r for r in rows}
    ckpts = sorted(((it, a) for a, it in checkpoints if a in by_agent))
    others = [r for r in rows if r["agent"] not in {a for _, a in ckpts}]
    xlabel = "training iteration (checkpoint)"
    if not ckpts:  # no run given: every agent on the x axis, best first
        ckpts, others, xlabel = [(i, r["agent"]) for i, r in enumerate(rows)], [], "agent"
    fig, ax = plt.subplots(figsize=(8, 4.8))
    if ckpts:
        xs = [it for it, _ in ckpts]
        mus = [by_agent[a]["mu"] for _, a in ckpts]
        errs = [3 * by_agent[a]["sigma"] for _, a in ckpts]
        line = "none" if xlabel == "agent" else "-"  # agents are categories, not a series
        ax.errorbar(xs, mus, yerr=errs, marker="o", capsize=4, linestyle=line,
                    label="mu ± 3σ")
        ax.plot(xs, [by_agent[a]["rating"] for _, a in ckpts], marker="s",
                linestyle="none" if line == "none" else "--", label="mu - 3σ (rank)")
        ax.plot(xs, [by_agent[a]["clean_mu"] for _, a in ckpts], marker="^",
                linestyle="none" if line == "none" else ":",
                label="mu without error-decided games")
        ax.set_xticks(xs, [a if xlabel == "agent" else f"{it}\n{a.split('/')[-1]}"
                           for it, a in ckpts], fontsize=7, rotation=15 if xlabel == "agent" else 0)
        ax.set_xlabel(xlabel)
    cmap = plt.get_cmap("tab10")
    for i, r in enumerate(others):
        ax.axhline(r["mu"], color=cmap((i + 3) % 10), linestyle="-.", linewidth=1,
                   label=f"{r['agent']} ({r['mu']:.1f})")
    ax.set_ylabel("TrueSkill rating")
    ax.set_title(title or ("arena ratings" if xlabel == "agent" else
                           "arena ratings over the run's checkpoints"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
