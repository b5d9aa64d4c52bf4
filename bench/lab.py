"""The learning lab's capacity probe (docs/lab.md): supervised fitting of Kuhn Poker's best
response per parametrization and prompt layout, reporting steps and seconds to fit. Prints
figures; asserts nothing. Resumable: an arm whose result is written is not run again.

    python bench/lab.py [--model embedded] [--out runs/lab/probe] [--steps 40] [--arms 0,1]
    make lab

Writes `<out>/arm_<i>.json` (the whole curve), `<out>/probe.md` and `probe.json` (the table),
and `<out>/probe.png` (per arm against steps: states at the best response, and the K-J
gap in P(bet) facing a bet, i.e. whether the card is read).
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import json
import sys
from pathlib import Path

from mars_core.run import offline  # noqa: E402

offline.apply()

from mars_core.lab import kuhn  # noqa: E402
from mars_core.lab.probe import ARMS, Arm, fit  # noqa: E402
from mars_core.models.precision import bf16_for, cpu_description  # noqa: E402
from mars_core.models.weights import resolve_model  # noqa: E402


def _row(i: int, c: dict) -> str:
    last = c["steps"][-1]
    p = last["p_bet"]
    fit_at = f"{c['fit_step']} ({c['fit_seconds']:.0f} s)" if c["fit_step"] is not None else \
        f"not in {last['step']} ({last['seconds']:.0f} s)"
    return (f"| {i} | {c['arm']['name']} | {c['prompt_tokens']:.0f} | {c['trainable'] / 1e6:.2f}M "
            f"| {fit_at} | {last['n_best']}/12 | {p['Jb']:.2f} / {p['Qb']:.2f} / {p['Kb']:.2f} "
            f"| {p['Jpb']:.2f} / {p['Qpb']:.2f} / {p['Kpb']:.2f} |")


def table(curves: dict[int, dict]) -> str:
    head = ("| # | arm | prompt tokens | trainable | steps to fit (s) | states at best "
            "(last) | P(bet) J/Q/K facing a bet (last) | after own pass, facing a bet |\n"
            "|---|---|---|---|---|---|---|---|")
    return "\n".join([head] + [_row(i, c) for i, c in sorted(curves.items())])


def plot(curves: dict[int, dict], path: Path) -> None:
    """Per arm against optimizer steps: the states at the best response, and whether the
    policy reads its card (P(bet) of K facing a bet minus J's: 0 while only the betting is
    read, positive once the card is)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for i, c in sorted(curves.items()):
        steps = [s["step"] for s in c["steps"]]
        left.plot(steps, [s["n_best"] for s in c["steps"]], marker=".", label=f"{i}: {c['arm']['name']}")
        right.plot(steps, [s["p_bet"]["Kb"] - s["p_bet"]["Jb"] for s in c["steps"]], marker=".")
    left.set_xlabel("optimizer steps")
    left.set_ylabel("states at the best response (of 12)")
    left.set_ylim(0, 12.5)
    left.legend(fontsize=7, loc="lower right")
    right.set_xlabel("optimizer steps")
    right.set_ylabel("P(bet | K facing a bet) - P(bet | J facing a bet)")
    right.axhline(0, color="grey", lw=0.5)
    fig.suptitle("Capacity probe: Kuhn Poker's best response, fitted by supervision")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded", help="the policy to probe (default embedded)")
    ap.add_argument("--out", default="runs/lab/probe", help="the output folder")
    ap.add_argument("--steps", type=int, default=40, help="the most optimizer steps per arm")
    ap.add_argument("--arms", default="", help="comma-separated arm numbers (default all)")
    ap.add_argument("--seed", type=int, default=0, help="the adapter's initialisation seed")
    ap.add_argument("--bf16", choices=("auto", "on", "off"), default="auto",
                    help="bf16 autocast (auto: whichever this CPU runs faster)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        chosen = [int(a) for a in args.arms.split(",") if a.strip()] or list(range(len(ARMS)))
    except ValueError:
        print(f"--arms {args.arms!r}: expected comma-separated numbers", file=sys.stderr)
        return 2
    bad = [a for a in chosen if not 0 <= a < len(ARMS)]
    if bad:
        print(f"--arms: no arm {bad[0]} (0 to {len(ARMS) - 1})", file=sys.stderr)
        return 2
    model = resolve_model(args.model)
    bf16 = bf16_for(args.bf16, "update")
    print(f"capacity probe on {cpu_description()}, {'bf16' if bf16 else 'fp32'}; best response "
          f"to bot:random: {kuhn.best_response()}")
    for i in chosen:
        done = out / f"arm_{i}.json"
        if done.exists():
            continue
        arm: Arm = ARMS[i]
        print(f"arm {i}: {arm.name}", flush=True)
        curve = fit(model, arm, steps=args.steps, seed=args.seed, bf16=bf16,
                    on_step=lambda r: print(f"  step {r['step']:3d} {r['seconds']:7.1f} s "
                                            f"best {r['n_best']:2d}/12  P(bet|Jb) "
                                            f"{r['p_bet']['Jb']:.2f} P(bet|Kb) "
                                            f"{r['p_bet']['Kb']:.2f}", flush=True))
        tmp = done.with_suffix(".tmp")
        tmp.write_text(json.dumps(vars(curve) | {"bf16": bf16, "cpu": cpu_description()},
                                  indent=1))
        tmp.replace(done)
    curves = {int(f.stem.split("_")[1]): json.loads(f.read_text())
              for f in out.glob("arm_*.json")}
    md = table(curves)
    (out / "probe.md").write_text(md + "\n")
    (out / "probe.json").write_text(json.dumps(
        {str(i): {k: c[k] for k in ("arm", "prompt_tokens", "trainable", "fit_step",
                                    "fit_seconds", "bf16", "cpu")} | {"last": c["steps"][-1]}
         for i, c in sorted(curves.items())}, indent=1))
    plot(curves, out / "probe.png")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
