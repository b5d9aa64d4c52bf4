"""The learning lab's capacity probe (docs/lab.md): supervised fitting of Kuhn Poker's best
response (or, with --game tic_tac_toe, of minimax moves in 24 Tic-Tac-Toe positions) per
parametrization and prompt layout, reporting steps and seconds to fit. Prints figures; asserts
nothing. Resumable: an arm whose result is written is not run again.

    python bench/lab.py [--model embedded] [--out runs/lab/probe] [--steps 40] [--arms 0,1]
                        [--game kuhn_poker|tic_tac_toe] [--positions 24] [--held-out N]
    make lab [GAME=tic_tac_toe] [POSITIONS=24] [HELD_OUT=24]

Writes `<out>/arm_<i>.json` (the whole curve), `<out>/probe.md` and `probe.json` (the table),
and `<out>/probe.png` (per arm against steps: states at the best response, and for Kuhn the
K-J gap in P(bet) facing a bet, i.e. whether the card is read; for Tic-Tac-Toe the mean
probability of the optimal moves, and with --held-out that of N other positions, measured at
every step and never fitted: whether what the probe fits carries over to positions it did not
see).
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from mars_core.run import offline  # noqa: E402

offline.apply()

from mars_core.lab import kuhn  # noqa: E402
from mars_core.lab.probe import ARMS, GAMES, TTT_POSITIONS, Arm, fit  # noqa: E402
from mars_core.models.precision import bf16_for, cpu_description  # noqa: E402
from mars_core.models.weights import resolve_model  # noqa: E402


# what probe.json keeps of each arm's curve (with its last step)
SUMMARY = ("arm", "prompt_tokens", "trainable", "states", "held_out", "fit_step", "fit_seconds",
           "bf16", "cpu")


def _row(i: int, c: dict) -> str:
    last = c["steps"][-1]
    n = c.get("states", 12)
    fit_at = f"{c['fit_step']} ({c['fit_seconds']:.0f} s)" if c["fit_step"] is not None else \
        f"not in {last['step']} ({last['seconds']:.0f} s)"
    head = (f"| {i} | {c['arm']['name']} | {c['prompt_tokens']:.0f} | "
            f"{c['trainable'] / 1e6:.2f}M | {fit_at} | {last['n_best']}/{n} ")
    if "p_bet" not in last:  # Tic-Tac-Toe
        p = last["p_best"]
        row = head + f"| {sum(p.values()) / len(p):.2f} |"
        h = last.get("held_out")
        return row + (f" {h['n_best']}/{c['held_out']}: {h['p_best_mean']:.2f} (from "
                      f"{c['steps'][0]['held_out']['p_best_mean']:.2f}; uniform "
                      f"{h['chance']:.2f}) |" if h else " - |")
    p = last["p_bet"]
    return head + (f"| {p['Jb']:.2f} / {p['Qb']:.2f} / {p['Kb']:.2f} "
                   f"| {p['Jpb']:.2f} / {p['Qpb']:.2f} / {p['Kpb']:.2f} |")


def table(curves: dict[int, dict], game: str = "kuhn_poker") -> str:
    if game == "tic_tac_toe":
        head = ("| # | arm | prompt tokens | trainable | steps to fit (s) | positions at an "
                "optimal move (last) | mean P(optimal moves) (last) | held-out positions: at an "
                "optimal move, mean P(optimal) (last) |\n"
                "|---|---|---|---|---|---|---|---|")
    else:
        head = ("| # | arm | prompt tokens | trainable | steps to fit (s) | states at best "
                "(last) | P(bet) J/Q/K facing a bet (last) | after own pass, facing a bet |\n"
                "|---|---|---|---|---|---|---|---|")
    return "\n".join([head] + [_row(i, c) for i, c in sorted(curves.items())])


def plot(curves: dict[int, dict], path: Path, game: str = "kuhn_poker") -> None:
    """Per arm against optimizer steps: the states at the best response, and for Kuhn whether
    the policy reads its card (P(bet) of K facing a bet minus J's: 0 while only the betting is
    read, positive once the card is); for Tic-Tac-Toe the mean probability of the optimal
    moves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ttt = game == "tic_tac_toe"
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    n = 12
    for i, c in sorted(curves.items()):
        n = c.get("states", 12)
        steps = [s["step"] for s in c["steps"]]
        left.plot(steps, [s["n_best"] for s in c["steps"]], marker=".", label=f"{i}: {c['arm']['name']}")
        right.plot(steps, [sum(s["p_best"].values()) / len(s["p_best"]) if ttt
                           else s["p_bet"]["Kb"] - s["p_bet"]["Jb"] for s in c["steps"]],
                   marker=".")
        if ttt and c.get("held_out"):
            right.plot(steps, [s["held_out"]["p_best_mean"] for s in c["steps"]], ls="--",
                       color=right.lines[-1].get_color(), label=f"{i}: held-out positions")
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=7, loc="lower right")
    left.set_xlabel("optimizer steps")
    left.set_ylabel(f"states at the best response (of {n})")
    left.set_ylim(0, n + 0.5)
    left.legend(fontsize=7, loc="lower right")
    right.set_xlabel("optimizer steps")
    right.set_ylabel("mean P(optimal moves)" if ttt
                     else "P(bet | K facing a bet) - P(bet | J facing a bet)")
    right.axhline(0, color="grey", lw=0.5)
    fig.suptitle("Capacity probe: Tic-Tac-Toe's minimax moves, fitted by supervision" if ttt
                 else "Capacity probe: Kuhn Poker's best response, fitted by supervision")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _progress(r: dict) -> None:
    p = r["p_best"]
    kuhn_part = (f"  P(bet|Jb) {r['p_bet']['Jb']:.2f} P(bet|Kb) {r['p_bet']['Kb']:.2f}"
                 if "p_bet" in r else "")
    h = r.get("held_out")
    held = f"  held-out {h['n_best']} P(best) {h['p_best_mean']:.2f}" if h else ""
    print(f"  step {r['step']:3d} {r['seconds']:7.1f} s best {r['n_best']:2d}/{len(p)}  "
          f"mean P(best) {sum(p.values()) / len(p):.2f}{kuhn_part}{held}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded", help="the policy to probe (default embedded)")
    ap.add_argument("--out", default="runs/lab/probe", help="the output folder")
    ap.add_argument("--steps", type=int, default=40, help="the most optimizer steps per arm")
    ap.add_argument("--arms", default="", help="comma-separated arm numbers (default all)")
    ap.add_argument("--seed", type=int, default=0, help="the adapter's initialisation seed")
    ap.add_argument("--game", choices=GAMES, default="kuhn_poker",
                    help="the states fitted: Kuhn's 12, or 24 Tic-Tac-Toe positions")
    ap.add_argument("--positions", type=int, default=TTT_POSITIONS,
                    help="Tic-Tac-Toe: how many positions to fit (default %(default)s)")
    ap.add_argument("--held-out", type=int, default=0,
                    help="Tic-Tac-Toe: also measure this many positions never fitted, each step")
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
    ttt = args.game == "tic_tac_toe"
    for flag, bad in (("--held-out", args.held_out < 0 or (args.held_out and not ttt)),
                      ("--positions", args.positions < 1
                       or (args.positions != TTT_POSITIONS and not ttt))):
        if bad:
            print(f"{flag}: a number of Tic-Tac-Toe positions (with --game tic_tac_toe)",
                  file=sys.stderr)
            return 2
    model = resolve_model(args.model)
    bf16 = bf16_for(args.bf16, "update")
    target = (f"best response to bot:random: {kuhn.best_response()}" if args.game == "kuhn_poker"
              else f"minimax moves in {args.positions} Tic-Tac-Toe positions")
    print(f"capacity probe on {cpu_description()}, {'bf16' if bf16 else 'fp32'}; {target}")
    for i in chosen:
        done = out / f"arm_{i}.json"
        if done.exists():
            continue
        arm: Arm = replace(ARMS[i], game=args.game)
        print(f"arm {i}: {arm.name}", flush=True)
        curve = fit(model, arm, steps=args.steps, seed=args.seed, bf16=bf16, on_step=_progress,
                    held_out=args.held_out, positions=args.positions)
        tmp = done.with_suffix(".tmp")
        tmp.write_text(json.dumps(vars(curve) | {"bf16": bf16, "cpu": cpu_description()},
                                  indent=1))
        tmp.replace(done)
    curves = {int(f.stem.split("_")[1]): json.loads(f.read_text())
              for f in out.glob("arm_*.json")}
    md = table(curves, args.game)
    (out / "probe.md").write_text(md + "\n")
    (out / "probe.json").write_text(json.dumps(
        {str(i): {k: c.get(k) for k in SUMMARY} | {"last": c["steps"][-1]}
         for i, c in sorted(curves.items())}, indent=1))
    plot(curves, out / "probe.png", args.game)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
