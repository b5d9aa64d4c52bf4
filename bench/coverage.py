"""How many Tic-Tac-Toe positions must be taught, one by one, to reach a score (docs/lab.md,
`mars_core/lab/coverage.py`): a table policy optimal in a fitted set of positions and uniform
elsewhere, the set grown most visited first (or, `--order gain`, worth most first); its exact
score against `bot:random`, its sampled score against `bot:mcts-10`, the share of its decisions
the set covers. With `--probe` (a capacity-probe arm's JSON, `runs/lab/<probe>/arm_<i>.json`)
each row also prices the set at that probe's cost, its seconds to fit divided by its
positions, on its CPU: a lower bound, since the probe's 64 positions fit slower a position than
its 24. Prints figures; asserts nothing.

    python bench/coverage.py [--step 25] [--limit N] [--games-per-seat 300] [--until 85 35]
                             [--order visits|gain] [--labels minimax|random_best]
                             [--probe runs/lab/probe_tic_tac_toe/arm_5.json] [--out c.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from mars_core.lab.coverage import LABELS, ORDERS, curve


def probe_cost(path: Path) -> tuple[float, int, str]:
    """(seconds to fit a position, the steps it took, the CPU) of a capacity-probe arm's
    result."""
    try:
        arm = json.loads(path.read_text())
        states, steps, seconds = int(arm["states"]), arm["fit_step"], float(arm["fit_seconds"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--probe {path}: not a capacity-probe arm's result ({e})") from None
    if steps is None or states < 1:
        raise ValueError(f"--probe {path}: that arm never fitted its positions, so it prices "
                         "nothing")
    return seconds / states, int(steps), arm.get("cpu", "unknown CPU")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", type=int, default=25, help="positions added a round (default 25)")
    ap.add_argument("--limit", type=int, default=None, help="stop at this many positions")
    ap.add_argument("--games-per-seat", type=int, default=300,
                    help="sampled games a seat against bot:mcts-10, each round (default 300)")
    ap.add_argument("--until", type=float, nargs=2, default=(85.0, 35.0),
                    metavar=("RANDOM", "MCTS"), help="stop once both scores reach these (85 35)")
    ap.add_argument("--order", choices=ORDERS, default="visits",
                    help="visits: the most reached positions first (a learner's order); gain: "
                         "those worth most against bot:random first (a curriculum that knows "
                         "the answer: the fewest positions for that score)")
    ap.add_argument("--labels", choices=LABELS, default="minimax",
                    help="what a fitted position is taught: minimax (the probe's labels) or "
                         "random_best (the best response to bot:random)")
    ap.add_argument("--probe", type=Path, default=None,
                    help="a capacity-probe arm's JSON, to price each row in CPU-hours")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    try:
        cost = probe_cost(args.probe) if args.probe else None
        t0 = time.perf_counter()
        rounds = curve(step=args.step, limit=args.limit, games_per_seat=args.games_per_seat,
                       seed=args.seed, until=tuple(args.until), order=args.order,
                       labels=args.labels)
    except ValueError as e:
        print(f"coverage: {e}", file=sys.stderr)
        return 2
    first = "most visited" if args.order == "visits" else "worth most against bot:random"
    print(f"Tic-Tac-Toe positions taught one by one ({args.labels} labels), {first} first "
          f"({len(rounds)} rounds, {time.perf_counter() - t0:.0f} s)")
    if cost:
        print(f"priced at the probe's {cost[0]:.0f} s a position ({cost[1]} full-batch steps to "
              f"fit; {args.probe}; {cost[2]})")
    print("| positions fitted | vs bot:random (exact) | vs bot:mcts-10 (sampled) "
          "| decisions covered" + (" | CPU-hours to fit |" if cost else " |"))
    print("|---:|---:|---:|---:|" + ("---:|" if cost else ""))
    for r in rounds:
        hours = f" {r.positions * cost[0] / 3600:.1f} |" if cost else ""
        print(f"| {r.positions} | {r.vs_random:.1f} | {r.vs_mcts:.1f} ± {r.vs_mcts_ci95:.1f} | "
              f"{100 * r.covered:.0f}% |{hours}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rounds": [asdict(r) for r in rounds],
                                        "probe": str(args.probe) if cost else None,
                                        "seconds_per_position": cost[0] if cost else None,
                                        "steps_to_fit": cost[1] if cost else None}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
