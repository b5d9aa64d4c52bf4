"""The ceiling of a self-play update: the same update on a table policy (no language model),
its values measured from self-play batches as the pipeline measures them, its exploitability
exact. Seconds on a CPU. Prints figures; asserts nothing.

    python bench/selfplay_tabular.py [--game kuhn_poker] [--iterations 60] [--episodes 256]
                                     [--seeds 3] [--out runs/lab/selfplay_tabular]
                                     [--run runs/kuhn_selfplay_s0 ...] [--points NAME=K:X,...]

Arms: the plain policy gradient (a softmax step with a per-state baseline), the greedy labels
(each state toward its best measured action: a best response), and Magnetic Mirror Descent
at the settings of `configs/learning/kuhn_selfplay.yaml` and a small sweep around them; each
from the uniform policy, every seed. Writes `<out>/<game>.json` and `<out>/<game>.png`
(exploitability against iterations, the mean over seeds); each `--run` (a language-model
run of `make learn`) adds its evaluated checkpoints' exploitability on the same axes (its
evaluations' `exploitability_<game>.json`), each `--points` a curve given as iteration:value
pairs (a run measured elsewhere).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mars_core.lab import selfplay

ARMS = {
    "policy gradient (lr 2)": ("pg", {"lr": 2.0}),
    "greedy labels (step 0.5)": ("greedy", {"lr": 0.5}),
    "MMD, fixed uniform magnet (alpha 0.5, eta 2)": ("mmd", {"alpha": 0.5, "eta": 2.0,
                                                             "magnet_rate": 0.0}),
    "MMD, no magnet (alpha 0, eta 2)": ("mmd", {"alpha": 0.0, "eta": 2.0}),
    "MMD, the recipe (alpha 0.5, eta 2, magnet rate 0.05)": ("mmd", {"alpha": 0.5, "eta": 2.0,
                                                                     "magnet_rate": 0.05}),
    "MMD (alpha 1, eta 1, magnet rate 0.1)": ("mmd", {"alpha": 1.0, "eta": 1.0,
                                                      "magnet_rate": 0.1}),
}


def lm_points(run: Path, game: str) -> list[tuple[int, float]]:
    """(iterations trained, exploitability) of each evaluation of a `make learn` run."""
    from mars_core.run.commit import read_json
    from mars_core.run.layout import EVALUATE, INIT, stage_dir

    pts = []
    for k, trained in [(INIT, 0)] + [(k, k + 1) for k in range(10_000)]:
        folder = stage_dir(run, k, EVALUATE)
        if k != INIT and not stage_dir(run, k, EVALUATE).parent.exists():
            break
        file = folder / f"exploitability_{game}.json"
        if file.is_file():
            pts.append((trained, read_json(file)["exploitability"]))
    if not pts:
        raise SystemExit(f"{run}: no evaluation with an exploitability of {game}")
    return pts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--game", default="kuhn_poker", choices=["kuhn_poker", "leduc_poker"])
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--episodes", type=int, default=256, help="games a batch; 0: exact values")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", default="runs/lab/selfplay_tabular")
    p.add_argument("--run", action="append", default=[], help="a language-model run folder")
    p.add_argument("--points", action="append", default=[], metavar="NAME=K:X,K:X",
                   help="a curve measured elsewhere: iteration:exploitability pairs")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    episodes = args.episodes or None
    results = {}
    marks = sorted({0, 10, 20, 30, 45, args.iterations} & set(range(args.iterations + 1)))
    print(f"{args.game}, {args.episodes or 'exact'} games an iteration, {args.seeds} seeds: "
          "exploitability (mean over seeds) at iterations " + ", ".join(map(str, marks))
          + "; the second half's worst seed's maximum")
    for name, (update, kw) in ARMS.items():
        start = time.perf_counter()
        curves = [selfplay.run(args.game, update, args.iterations, episodes=episodes, seed=s,
                               **kw).exploitability for s in range(args.seeds)]
        mean = [sum(c[i] for c in curves) / len(curves) for i in range(len(curves[0]))]
        worst = max(max(c[args.iterations // 2:]) for c in curves)
        results[name] = {"update": update, "settings": kw, "curves": curves, "mean": mean,
                         "second_half_max": worst}
        print(f"| {name} | " + " | ".join(f"{mean[i]:.3f}" for i in marks)
              + f" | {worst:.3f} | {time.perf_counter() - start:.1f} s |", flush=True)
    (out / f"{args.game}.json").write_text(json.dumps(
        {"game": args.game, "episodes": args.episodes, "iterations": args.iterations,
         "seeds": args.seeds, "arms": results}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, r in results.items():
        ax.plot(r["mean"], label=f"table: {name}", lw=1, alpha=0.8)
    for run in map(Path, args.run):
        pts = lm_points(run, args.game)
        print(f"{run.name}: " + ", ".join(f"iter {k} {x:.3f}" for k, x in pts))
        ax.plot(*zip(*pts), marker="o", lw=2.5, label=f"language model: {run.name}")
    for spec in args.points:
        name, _, pairs = spec.partition("=")
        pts = [(int(k), float(x)) for k, x in (pair.split(":") for pair in pairs.split(","))]
        ax.plot(*zip(*pts), marker="s", lw=2, ls="--", label=f"language model: {name}")
    ax.set_xlabel("iterations (one self-play batch each)")
    ax.set_ylabel("exploitability")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{args.game}: table policies, {args.episodes or 'exact'} games a batch")
    fig.tight_layout()
    fig.savefig(out / f"{args.game}.png", dpi=110)
    print(f"wrote {out / (args.game + '.json')} and {out / (args.game + '.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
