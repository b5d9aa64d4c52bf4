"""The paper's self-play ablation, read exactly: each arm's runs (one per seed) side by side at
the evaluations they share, by the policy's exact exploitability and its score against each bot
(paired with its own start). Prints a Markdown table; asserts nothing.

    python bench/selfplay_ablation.py \\
        --arm "self-play=runs/kuhn_selfplay_s0,runs/kuhn_selfplay_s1,runs/kuhn_selfplay_s2" \\
        --arm "vs bot:random=runs/abl_vs_random_s0,..." \\
        --arm "vs bot:nash=runs/abl_vs_nash_s0,..." \\
        [--game kuhn_poker] [--upto 12]

Each run's `learning/learning.json` (written by `bench/learning.py`: `make learn`) holds the
exploitability of every evaluated policy and its paired rows; `--upto` keeps the evaluations up
to that iteration (the arms' common budget: a longer self-play run is read at the same step).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def read(run: Path, game: str, upto: int) -> dict:
    """{step: {"exploitability": x, "<opponent>": (score, paired diff, its half-width)}}."""
    data = json.loads((run / "learning" / "learning.json").read_text())
    steps = {label: step for label, (step, _minutes) in data["steps"].items() if step <= upto}
    out: dict[int, dict] = {step: {} for step in steps.values()}
    for label, step in steps.items():
        x = data.get("exploitability", {}).get(label, {}).get(game)
        if x:
            out[step]["exploitability"] = x["exploitability"]
    for row in data["rows"]:
        if row["game"] == game and row["policy"] in steps:
            out[steps[row["policy"]]][row["opponent"]] = (row["normalized_return"], row["diff"],
                                                        row["diff_ci95"])
    return out


def mean_sd(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "-"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arm", action="append", required=True, help="NAME=RUN,RUN,...")
    p.add_argument("--game", default="kuhn_poker")
    p.add_argument("--upto", type=int, default=12)
    args = p.parse_args()
    arms = {}
    for spec in args.arm:
        name, _, runs = spec.partition("=")
        if not runs:
            p.error(f"--arm {spec!r}: expected NAME=RUN,RUN,...")
        arms[name] = {Path(r): read(Path(r), args.game, args.upto) for r in runs.split(",")}
    steps = sorted(set.intersection(*(set(r) for runs in arms.values() for r in runs.values())))
    last = steps[-1]
    opponents = sorted({k for runs in arms.values() for r in runs.values() for k in r[last]
                        if k != "exploitability"})
    print(f"| arm | seeds | exploitability at " + " | ".join(f"iter {s}" if s else "start"
                                                            for s in steps)
          + " | " + " | ".join(f"vs `{o}` at iter {last} (paired vs start)" for o in opponents)
          + " |")
    print("|---|---|" + "---:|" * len(steps) + "---|" * len(opponents))
    for name, runs in arms.items():
        cells = [mean_sd([r[s]["exploitability"] for r in runs.values()
                          if "exploitability" in r[s]]) for s in steps]
        seeds = [", ".join(f"{r[last][o][0]:.1f} ({r[last][o][1]:+.1f} ± {r[last][o][2]:.1f})"
                           for r in runs.values() if o in r[last]) for o in opponents]
        print(f"| {name} | {len(runs)} | " + " | ".join(cells) + " | " + " | ".join(seeds) + " |")
    print("\nper seed (exploitability, " + ", ".join("start" if s == 0 else f"iter {s}"
                                                   for s in steps) + "):")
    for name, runs in arms.items():
        for run, r in runs.items():
            print(f"  {name:14s} {run.name:22s} " + "  ".join(
                f"{r[s].get('exploitability', float('nan')):.3f}" for s in steps))


if __name__ == "__main__":
    main()
