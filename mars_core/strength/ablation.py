"""An ablation across seeds, aggregated: which variant is stronger, and is the difference real?

The unit of replication is the seed (a training run): within one seed every variant's final
evaluation plays the same deals and seats (the evaluation's deals follow `run.seed` alone), so
`paired_rows` pairs each variant with the reference deal by deal; across seeds the runs are
independent repetitions. Per (base preset, game, opponent, variant):

- final strength: the mean over seeds of the seed's normalized return (0-100) with a 95%
  interval over seeds (Student's t, n - 1 degrees of freedom: `mean_ci95` without bounds, the
  seeds' spread being the thing measured);
- against the reference variant: each seed's paired difference (same deals), then their mean
  over seeds with the same t-interval. A difference *clears* when it exceeds twice its
  half-width; with one seed the spread is unknown and nothing clears.

A game with several evaluation opponents also gets a row for opponent `all`: per seed, the mean
of its opponents' values. Learning curves: per (base, variant, cell, iterations trained) the
mean over seeds with the same interval. Pure: the flow (`flows/compare.py`) reads the runs.
"""
from __future__ import annotations

from collections import defaultdict

from mars_core.stats.intervals import mean_ci95
from mars_core.strength.suite import paired_rows
from mars_core.types import Episode

ALL = "all"  # the opponent of a game's row averaged over its evaluation opponents


def seed_interval(values: list[float]) -> tuple[float | None, float | None]:
    """Mean over seeds and the half-width of its 95% t-interval (n - 1 degrees of freedom);
    the half-width is None under two seeds (unknown), the mean None with none."""
    if not values:
        return None, None
    mean, half = mean_ci95(list(values))
    return mean, (half if len(values) >= 2 else None)


def clears(diff: float | None, half: float | None) -> bool:
    """A difference that exceeds twice its 95% half-width (never when either is unknown)."""
    return diff is not None and half is not None and abs(diff) > 2 * half


def per_seed_rows(evaluations: dict[str, list[Episode]], reference: str) -> list[dict]:
    """One seed's final evaluations (variant -> episodes, on the same deals): `paired_rows`
    against `reference` (per game and opponent: `normalized_return`, `invalid_rate`, the paired
    `diff` over `paired_n` games), plus an `all` row per game with several opponents."""
    rows = paired_rows(evaluations, reference)
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        grouped[(r["policy"], r["game"])].append(r)
    for (policy, game), mine in grouped.items():
        if len(mine) < 2:
            continue
        paired = all(r["paired_n"] for r in mine)  # the reference met every opponent too
        rows.append({"policy": policy, "game": game, "opponent": ALL,
                     "n": sum(r["n"] for r in mine),
                     "normalized_return": _mean([r["normalized_return"] for r in mine]),
                     "ci95": None, "invalid_rate": _mean([r["invalid_rate"] for r in mine]),
                     "diff": _mean([r["diff"] for r in mine]) if paired else 0.0,
                     "diff_ci95": None,
                     "paired_n": sum(r["paired_n"] for r in mine) if paired else 0})
    return rows


def add_gains(rows: list[dict], strength: list[dict], policy: str = "final") -> list[dict]:
    """Each of one run's `per_seed_rows` rows with `gain`: its final policy's paired difference
    from its own start (the run's `final/strength/` rows, `policy` = the final one's label) on
    the same game and opponent; an `all` row gets the mean over its game's opponents. None
    where the run has no start-vs-final comparison."""
    found = {(r["game"], r["opponent"]): r["diff"] for r in strength
             if r["policy"] == policy and r.get("paired_n")}
    out = []
    for r in rows:
        if r["opponent"] == ALL:
            mine = [v for (g, _), v in found.items() if g == r["game"]]
            gain = _mean(mine) if mine else None
        else:
            gain = found.get((r["game"], r["opponent"]))
        out.append({**r, "gain": gain})
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def ablation_rows(seed_rows: list[dict], reference: str) -> list[dict]:
    """Aggregate `per_seed_rows` rows over seeds. Each input row carries its `seed` and its
    `base` (the preset the variants were laid over; None for one). One output row per (base,
    game, opponent, variant): `seeds`, `normalized_return` (mean over
    seeds) with `ci95` (t over seeds, None under 2 seeds) and `per_seed`; `invalid_rate` (mean);
    against `reference`: `diff` (mean over seeds of each seed's paired difference) with
    `diff_ci95`, `diff_per_seed`, `diff_ci95_per_seed` (each seed's half-width over its paired
    deals), `paired_games` and `clears`. The reference's own row has diff None. Where the rows
    carry `gain` (`add_gains`): `gain`, the mean over seeds of each run's paired difference from
    its own start, with `gain_ci95` and `gain_per_seed` (None without any). Sorted by base,
    game, opponent (`all` last) and variant, each in the order first seen."""
    cells: dict[tuple, list[dict]] = {}
    for r in seed_rows:
        cells.setdefault((r.get("base"), r["game"], r["opponent"], r["policy"]), []).append(r)
    out = []
    for (base, game, opponent, variant), mine in cells.items():
        mine = sorted(mine, key=lambda r: r["seed"])
        mean, half = seed_interval([r["normalized_return"] for r in mine])
        row = {"base": base, "game": game, "opponent": opponent, "variant": variant,
               "seeds": [r["seed"] for r in mine], "normalized_return": mean, "ci95": half,
               "per_seed": [r["normalized_return"] for r in mine],
               "invalid_rate": _mean([r["invalid_rate"] for r in mine]),
               "diff": None, "diff_ci95": None, "diff_per_seed": [], "diff_ci95_per_seed": [],
               "paired_games": [], "clears": False}
        gains = [r["gain"] for r in mine if r.get("gain") is not None]
        gain, gain_half = seed_interval(gains)
        row |= {"gain": gain, "gain_ci95": gain_half, "gain_per_seed": gains}
        if variant != reference:
            paired = [r for r in mine if r["paired_n"]]  # seeds where the reference played too
            diff, diff_half = seed_interval([r["diff"] for r in paired])
            row |= {"diff": diff, "diff_ci95": diff_half,
                    "diff_per_seed": [r["diff"] for r in paired],
                    "diff_ci95_per_seed": [r["diff_ci95"] for r in paired],
                    "paired_games": [r["paired_n"] for r in paired],
                    "clears": clears(diff, diff_half)}
        out.append(row)
    first = {}  # each value's first appearance, per field: the table's order
    for r in out:
        for field in ("base", "game", "opponent", "variant"):
            first.setdefault((field, r[field]), len(first))
    return sorted(out, key=lambda r: (first[("base", r["base"])], first[("game", r["game"])],
                                      r["opponent"] == ALL, first[("opponent", r["opponent"])],
                                      first[("variant", r["variant"])]))


def curve_bands(curves: dict[tuple[str | None, str, int], list[dict]]) -> list[dict]:
    """Learning curves across seeds. `curves`: (base, variant, seed) -> that run's curve, rows
    `{"iterations": t, <cell>: normalized return, ...}` (`tasks.strength.learning_curve`). One
    row per (base, variant, cell, iterations) that some seed evaluated: `mean` over the seeds
    that did, `ci95` (t over seeds, None under 2), `seeds`."""
    acc: dict[tuple, list[tuple[int, float]]] = {}
    for (base, variant, seed), rows in curves.items():
        for row in rows:
            for cell, value in row.items():
                if cell != "iterations":
                    key = (base, variant, cell, row["iterations"])
                    acc.setdefault(key, []).append((seed, value))
    out = []
    by_cell = sorted(acc.items(), key=lambda kv: (str(kv[0][0]), kv[0][2], kv[0][1], kv[0][3]))
    for (base, variant, cell, t), points in by_cell:
        mean, half = seed_interval([v for _, v in points])
        out.append({"base": base, "variant": variant, "cell": cell, "iterations": t,
                    "mean": mean, "ci95": half, "seeds": sorted(s for s, _ in points)})
    return out


def _interval(mean: float | None, half: float | None, sign: str = "") -> str:
    if mean is None:
        return "-"
    value = format(mean, f"{sign}.1f")
    return f"{value} ± {half:.1f}" if half is not None else f"{value} (1 seed)"


def ablation_markdown(rows: list[dict], reference: str) -> str:
    """The table (one row per base, game, opponent and variant) and a sentence naming the
    differences that clear twice their half-width (or saying that none does)."""
    lines = ["| base | game | opponent | variant | seeds | after training | invalid | "
             f"vs its start (paired) | vs {reference} (paired) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["variant"] == reference:
            vs = "-"
        elif r["diff"] is None:
            vs = "no paired seed"
        else:
            vs = _interval(r["diff"], r["diff_ci95"], "+") + (" *" if r["clears"] else "")
        lines.append(f"| {r['base'] or '-'} | {r['game']} | {r['opponent']} | {r['variant']} | "
                     f"{len(r['seeds'])} | {_interval(r['normalized_return'], r['ci95'])} | "
                     f"{r['invalid_rate']:.0%} | "
                     f"{_interval(r.get('gain'), r.get('gain_ci95'), '+')} | {vs} |")
    notes = ["", "After training: normalized return (0-100) in the last evaluation, mean over "
             "seeds ± the half-width of its 95% t-interval over seeds (n - 1 degrees of freedom). "
             "vs its start: each run's final policy against its own start on the same deals and "
             f"seats, then the mean over seeds with the same interval. vs {reference}: each "
             "seed's difference on the same deals and seats, then the mean over seeds with the "
             "same interval; `*`: it clears twice its half-width."]
    clear = [r for r in rows if r["clears"]]
    if clear:
        notes.append("Differences that clear twice their half-width: " + "; ".join(
            f"{r['variant']} on {r['game']} vs {r['opponent']} ({r['base'] or '-'}): "
            f"{r['diff']:+.1f} ± {r['diff_ci95']:.1f}" for r in clear) + ".")
    else:
        notes.append(f"No difference from {reference} clears twice its half-width.")
    if any(r["ci95"] is None for r in rows):
        notes.append("A cell with one seed has no interval: its differences cannot clear.")
    return "\n".join(lines + notes) + "\n"


def ablation_plot(rows: list[dict], bands: list[dict], path, title: str = "") -> None:
    """One figure row per (base, game, opponent): left, each variant's final strength (mean
    over seeds with its 95% interval, the seeds as dots); right, the learning curves (mean over
    seeds, the band its 95% interval; absent where the runs evaluated only at the end)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(dict.fromkeys((r["base"], r["game"], r["opponent"]) for r in rows
                               if r["opponent"] != ALL))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    colors = {v: f"C{i % 10}" for i, v in enumerate(variants)}
    fig, axes = plt.subplots(len(cells), 2, figsize=(11, 3.2 * max(1, len(cells))),
                             squeeze=False)
    for (base, game, opponent), (left, right) in zip(cells, axes):
        label = f"{game} vs {opponent}" + (f" ({base})" if base else "")
        for x, variant in enumerate(variants):
            row = next((r for r in rows if (r["base"], r["game"], r["opponent"], r["variant"])
                        == (base, game, opponent, variant)), None)
            if row is None or row["normalized_return"] is None:
                continue
            left.errorbar([x], [row["normalized_return"]], yerr=[row["ci95"] or 0.0], fmt="o",
                          color=colors[variant], capsize=4)
            left.scatter([x] * len(row["per_seed"]), row["per_seed"], s=10, alpha=0.4,
                         color=colors[variant])
        left.set_xticks(range(len(variants)), variants, rotation=20, fontsize=8)
        left.set_ylabel("normalized return")
        left.set_title(f"final: {label}", fontsize=9)
        drawn = False
        for variant in variants:
            mine = [b for b in bands if (b["base"], b["variant"], b["cell"])
                    == (base, variant, f"{game} vs {opponent}")]
            if not mine:
                continue
            xs, ys = [b["iterations"] for b in mine], [b["mean"] for b in mine]
            halves = [b["ci95"] if b["ci95"] is not None else 0.0 for b in mine]
            right.plot(xs, ys, marker="o", color=colors[variant], label=variant)
            right.fill_between(xs, [y - h for y, h in zip(ys, halves)],
                               [y + h for y, h in zip(ys, halves)], color=colors[variant],
                               alpha=0.15)
            drawn = True
        right.set_xlabel("iterations trained")
        right.set_title(f"learning curve: {label}", fontsize=9)
        if drawn:
            right.legend(fontsize=7)
        else:
            right.text(0.5, 0.5, "no per-iteration evaluations", ha="center",
                       transform=right.transAxes)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
