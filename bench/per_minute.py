"""Learning per CPU-minute, side by side (issue 45's "learning per CPU-hour"): for each run
that `make learn` reported (its `learning/learning.json`), the paired gain over its own start
at its last evaluation within `--minutes` of training (warm-up, rollouts and updates;
evaluations left out), per opponent, the gain per training hour, and, where a baseline run is
named, the ratio of the two runs' gains per hour. Runs compare only when they ran on one
machine under one load: each run's CPU is printed beside it, and a mismatch is flagged.

    python bench/per_minute.py --minutes 45 --baseline runs/tic_tac_toe runs/tic_tac_toe_mc
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def gains(run: Path, minutes: float) -> tuple[dict, str]:
    """({opponent: (policy, minutes, gain, its 95% half-width, optimal-move share or None)} at
    the last evaluation within `minutes` of training, the run's machine)."""
    path = run / "learning" / "learning.json"
    if not path.is_file():
        raise ValueError(f"{run} has no {path.relative_to(run)}: report it first "
                         "(bench/learning.py --config ... --no-train)")
    data = json.loads(path.read_text())
    steps = {label: float(m) for label, (_, m) in data["steps"].items()}
    within = [label for label, m in steps.items() if label != "start" and m <= minutes]
    out: dict[str, tuple] = {}
    if within:
        last = max(within, key=steps.get)
        optimal = data.get("ttt_optimal_rates", {}).get(last, {}).get("decisive")
        for row in data["rows"]:
            if row["policy"] == last:
                out[f"{row['game']} vs {row['opponent']}"] = (
                    last, steps[last], row["diff"], row["diff_ci95"],
                    optimal[0] if optimal else None)
    return out, data.get("machine", "unknown")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders reported by make learn")
    ap.add_argument("--minutes", type=float, default=45.0, help="training minutes (default 45)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="the run the others' gains per hour are divided by")
    args = ap.parse_args(argv)
    runs = ([args.baseline] if args.baseline else []) + [r for r in args.runs if r != args.baseline]
    try:
        table = {run: gains(run, args.minutes) for run in runs}
    except ValueError as e:
        print(f"per_minute: {e}", file=sys.stderr)
        return 2
    machines = {m for _, m in table.values()}
    print(f"paired gain over each run's start at its last evaluation within {args.minutes:g} "
          "training minutes")
    if len(machines) > 1:
        print("WARNING: the runs ran on different machines; their minutes do not compare: "
              + "; ".join(sorted(machines)))
    base = table[args.baseline][0] if args.baseline else {}
    print("| run | opponent | policy | minutes | paired gain | per hour | vs baseline "
          "| optimal moves |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for run, (cells, machine) in table.items():
        if not cells:
            print(f"| {run.name} | - | no evaluation within {args.minutes:g} min | | | | | |")
        for opp, (policy, m, gain, ci, optimal) in sorted(cells.items()):
            rate = gain / m * 60 if m else float("nan")
            ratio = "-"
            if opp in base and run != args.baseline:
                _, bm, bgain, bci, _ = base[opp]
                # a ratio to a gain its interval does not separate from 0 means nothing
                ratio = (f"{rate / (bgain / bm * 60):.1f}x" if bm and bgain > bci
                         else "no clear baseline gain")
            print(f"| {run.name} | {opp} | {policy} | {m:.1f} | {gain:+.1f} ± {ci:.1f} | "
                  f"{rate:+.1f} | {ratio} | {'-' if optimal is None else f'{optimal:.0%}'} |")
    print("machine: " + "; ".join(sorted(machines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
