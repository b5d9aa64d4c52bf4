"""Does training make the model better? Train a learning recipe, then turn its evaluations (the
start policy and every `evaluation.every`-th checkpoint, all on the same deals and seats) into a
learning curve and a before/after table with paired differences. Prints figures; asserts
nothing.

    python bench/learning.py --config configs/learning/kuhn_vs_random.yaml [--runs-dir runs]
                             [--run-name NAME] [--no-train]
    make learn PRESET=configs/learning/tic_tac_toe.yaml

Training is `mars train` (resumable: run it again to continue). Written beside the run, in
`<run>/learning/`, and into the run's MLflow run (artifacts `learning/`, metrics
`learning/<game>/<opponent>/{normalized_return,paired_diff,paired_diff_ci95}` per iteration):
- `exploitability.png`: Kuhn and Leduc Poker's exact exploitability of each evaluated policy
  against minutes of training (the evaluations' `exploitability_<game>.json`; metric
  `learning/<game>/exploitability`);
- `learning_curve.png`: normalized return (0-100) with its 95% band per evaluated policy, and
  the invalid-reply rate, against iterations (top axis: minutes of training so far);
- `learning.md`, `learning.json`: every evaluated policy against the start policy, paired game by
  game, and the verdict: improved when the final paired difference exceeds twice its 95%
  half-width; in Kuhn Poker, each evaluated policy's bet rate per card (J/Q/K: does it play
  its card?); in Tic-Tac-Toe, the share of its moves that are minimax-optimal (all, and where
  some legal move is not); in Colonel Blotto, its allocations (valid, spread, each one's exact
  expected round result against `bot:random`: `mars_core.lab.blotto`); and what each update
  did (token entropy, clip share, ratio, KL to the old policy, the engine/trainer gap),
  iteration by iteration, from the `train_step` metrics.
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import json
import sys
import time
from pathlib import Path

from mars_core.run import offline  # noqa: E402

offline.apply()

from cli.main import main as mars  # noqa: E402
from mars_core.strength.suite import paired_markdown, paired_rows  # noqa: E402
from mars_core.games.blotto import format_allocation  # noqa: E402
from mars_core.lab import blotto, coverage, kuhn, tictactoe  # noqa: E402
from mars_core.rollout.reports import exploitability_plot, learning_curve_plot  # noqa: E402
from mars_core.strength.curve import (evaluations, exploitability_by_policy,  # noqa: E402
                                      stage_minutes)
from mars_core.run.commit import is_done, read_json  # noqa: E402
from mars_core.run.layout import METRICS_FILE, TRAIN_STEP, read_episodes, stage_dir  # noqa: E402
from tasks.paths import read_config  # noqa: E402
from mars_core.run.memory import memory_markdown, memory_peaks  # noqa: E402
from tasks.tracking import log_artifacts, log_metrics_once  # noqa: E402


def verdicts(rows: list[dict], last: str) -> list[str]:
    """The last policy's verdict per (game, opponent): `diff_ci95` is `paired_rows`' 95%
    half-width of the paired difference (`mean_ci95`: Student's t, its variance floored for
    outcomes in -100..100, so a few identical games never make a zero-width interval)."""
    return [f"{r['game']} vs {r['opponent']}: {r['diff']:+.1f} ± {r['diff_ci95']:.1f} normalized "
            f"points over {r['paired_n']} paired games -> "
            + ("improved" if r["diff"] > 2 * r["diff_ci95"] else
               "worse" if -r["diff"] > 2 * r["diff_ci95"] else "no clear change")
            + ("" if r["reading"] in ("no clear change", "play") else f" ({r['reading']})")
            for r in rows if r["policy"] == last]


UPDATE_KEYS = ("entropy", "clip_frac", "ratio_mean", "ratio_max", "approx_kl_old", "behaviour_gap",
               "is_weight_mean", "grad_norm", "optimizer_steps", "trust_region_stops")


def exploitability_markdown(exp: dict[str, dict[str, dict]], steps: dict) -> str:
    games = sorted({g for by in exp.values() for g in by})
    out = []
    for game in games:
        out += [f"\n## {game}: exploitability of the policy itself (exact, OpenSpiel; 0 is an "
                "equilibrium)\n",
                "| policy | minutes of training | exploitability | best response seat 0 / 1 "
                "| policy's value seat 0 | legal answers' mass |", "|---|---|---|---|---|---|"]
        out += [f"| {label} | {steps[label][1]:.1f} | {r['exploitability']:.4f} "
                f"| {r['best_response'][0]:+.3f} / {r['best_response'][1]:+.3f} "
                f"| {r['value'][0]:+.3f} | {r['legal_mass']:.3f} |"
                for label, by in exp.items() if (r := by.get(game))]
        if game == "kuhn_poker":
            out.append("\nReferences: uniform (bot:random) 0.4583, always bet 0.3333, a Nash "
                       "equilibrium 0.")
    return "\n".join(out) + ("\n" if out else "")


def _kuhn_decisions(episodes):
    """(card, betting history, bet) of each valid Kuhn decision of the policy, its observation
    read back in either prompt layout (`mars_core.lab.kuhn.read_decision`)."""
    for ep in episodes:
        for t in ep.turns:
            if t.game != "kuhn_poker" or t.agent != "policy" or not t.valid:
                continue
            seen = kuhn.read_decision(t.observation)
            if seen is not None:
                yield seen[0], seen[1], "BET" in t.action.upper()


def kuhn_bet_rates(episodes, facing: bool | None = None) -> dict[str, tuple[float, int]]:
    """Card -> (share of the policy's valid Kuhn decisions that bet or call, decisions); with
    `facing`, only the decisions facing a bet (True: bet = call, pass = fold) or not (False)."""
    counts: dict[str, list[int]] = {}
    for card, history, bet in _kuhn_decisions(episodes):
        if facing is not None and history.endswith("b") != facing:
            continue
        c = counts.setdefault(card, [0, 0])
        c[0] += bet
        c[1] += 1
    return {card: (bets / n, n) for card, (bets, n) in sorted(counts.items())}


def kuhn_state_rates(episodes) -> dict[str, tuple[float, int]]:
    """Information state (`J`, `Qp`, `Kb`, `Jpb`, ...) -> (share that bet or call, decisions),
    beside the best response to bot:random (which folds only J facing a bet)."""
    counts: dict[str, list[int]] = {}
    for card, history, bet in _kuhn_decisions(episodes):
        c = counts.setdefault(card + history, [0, 0])
        c[0] += bet
        c[1] += 1
    order = [i.key for i in kuhn.info_states()]
    return {k: (counts[k][0] / counts[k][1], counts[k][1]) for k in order if k in counts}


def states_markdown(rates: dict[str, dict]) -> str:
    """The bet/call rate per information state, per evaluated policy (Kuhn only), and the
    exact expected normalized return of those rates against bot:random (no deal noise; a state
    the policy never reached is counted at 50%: it weighs nothing where the policy's own
    moves never lead to it)."""
    rates = {label: r for label, r in rates.items() if r}
    if not rates:
        return ""
    br = kuhn.best_response()
    keys = [i.key for i in kuhn.info_states()]
    out = ["\n## Kuhn Poker: bet or call rate per information state (card, then the betting: "
           "p pass, b bet)\n", "| policy | " + " | ".join(keys) + " | exact vs bot:random |",
           "|---" * (len(keys) + 2) + "|",
           "| best response to bot:random | " + " | ".join(f"{br[k]:.0%}" for k in keys)
           + f" | {kuhn.normalized_value(br):.1f} |"]
    for label, r in rates.items():
        exact = kuhn.normalized_value({k: r[k][0] if k in r else 0.5 for k in keys})
        out.append(f"| {label} | " + " | ".join(f"{r[k][0]:.0%} ({r[k][1]})" if k in r else "-"
                                               for k in keys) + f" | {exact:.1f} |")
    return "\n".join(out) + "\n"


def ttt_optimal_rates(episodes) -> dict[str, tuple[float, int]]:
    """How often the policy's valid Tic-Tac-Toe moves are minimax-optimal
    (`mars_core.lab.tictactoe`): "all" its moves, "decisive" those in positions where some
    legal move is not optimal (elsewhere any move is), each (share, moves); and "chance", what
    a uniformly random move would score in those decisive positions. "vs_random" and
    "vs_random_chance" the same for the best response to a random opponent
    (`coverage.label_moves(..., "random_best")`, where some move is not one): what
    `bot:random` rewards, where minimax is indifferent (the opening: a corner)."""
    counts = {"all": [0, 0], "decisive": [0, 0], "chance": [0.0, 0], "vs_random": [0, 0],
              "vs_random_chance": [0.0, 0]}
    for ep in episodes:
        for t in ep.turns:
            if t.game != "tic_tac_toe" or t.agent != "policy" or not t.valid:
                continue
            seen, cell = tictactoe.read_position(t.observation), tictactoe.move_cell(t.action)
            if seen is None or cell is None:
                continue
            best = tictactoe.optimal_moves(*seen)
            kinds = ("all", "decisive") if len(best) < seen[0].count(".") else ("all",)
            for kind in kinds:
                counts[kind][0] += cell in best
                counts[kind][1] += 1
            if len(kinds) == 2:
                counts["chance"][0] += len(best) / seen[0].count(".")
                counts["chance"][1] += 1
            if coverage.decisive(*seen, labels="random_best"):
                reply = coverage.label_moves(*seen, labels="random_best")
                counts["vs_random"][0] += cell in reply
                counts["vs_random"][1] += 1
                counts["vs_random_chance"][0] += len(reply) / seen[0].count(".")
                counts["vs_random_chance"][1] += 1
    return {k: (hit / n, n) for k, (hit, n) in counts.items() if n}


def optimal_markdown(rates: dict[str, dict]) -> str:
    rates = {label: r for label, r in rates.items() if r}
    if not rates:
        return ""
    out = ["\n## Tic-Tac-Toe: the policy's valid moves that are minimax-optimal, and that "
           "best-respond to a random opponent\n",
           "| policy | all moves | where some move is not optimal | a random move there "
           "| best reply to random, where it matters | a random move there |",
           "|---|---|---|---|---|---|"]

    def cell(r: dict, k: str, n: bool = True) -> str:
        return (f"{r[k][0]:.0%}" + (f" (n={r[k][1]})" if n else "")) if k in r else "-"

    out += [f"| {label} | {cell(r, 'all')} | {cell(r, 'decisive')} | {cell(r, 'chance', False)} "
            f"| {cell(r, 'vs_random')} | {cell(r, 'vs_random_chance', False)} |"
            for label, r in rates.items()]
    return "\n".join(out) + "\n"


def blotto_markdown(rates: dict[str, dict]) -> str:
    rates = {label: r for label, r in rates.items() if r}
    if not rates:
        return ""
    out = ["\n## Colonel Blotto: the policy's allocations\n",
           "| policy | turns valid | spread (every field >= 5) | a round's expected result vs "
           "`bot:random` (-1 to 1) | rounds won | games with an invalid turn |",
           "|---|---|---|---|---|---|"]

    def cell(r: dict, k: str, fmt: str = ".0%") -> str:
        return f"{r[k][0]:{fmt}} (n={r[k][1]})" if k in r else "-"

    out += [f"| {label} | {cell(r, 'valid', '.1%')} | {cell(r, 'spread')} "
            f"| {cell(r, 'value', '+.3f')} | {cell(r, 'rounds_won')} "
            f"| {cell(r, 'games_invalid')} |" for label, r in rates.items()]
    best, score = blotto.best_vs_random()
    out.append(f"\nThe best allocation every round, {format_allocation(list(best))}: a round "
               f"{blotto.value_vs_random(best):+.3f}, a normalized return of {score:.1f} "
               "against `bot:random` (exact).")
    return "\n".join(out) + "\n"


def update_stats(run: Path, iterations: int) -> list[dict]:
    """Each finished update's statistics (`train/<key>` of its train_step metrics)."""
    rows = []
    for k in range(iterations):
        file = stage_dir(run, k, TRAIN_STEP) / METRICS_FILE
        if is_done(file.parent) and file.is_file():
            m = read_json(file)
            rows.append({"iter": k + 1, **{key: m.get(f"train/{key}") for key in UPDATE_KEYS}})
    return rows


def stats_markdown(bets: dict[str, dict], updates: list[dict]) -> str:
    out = []
    for title, rates in bets.items():
        if not any(rates.values()):
            continue
        out += [f"\n## Kuhn Poker: bet or call rate per card, {title} (policy's valid decisions)\n",
                "| policy | " + " | ".join(f"{c}" for c in "JQK") + " |", "|---|---|---|---|"]
        out += [f"| {label} | " + " | ".join(f"{r[c][0]:.0%} (n={r[c][1]})" if c in r else "-"
                                            for c in "JQK") + " |"
                for label, r in rates.items() if r]
    if updates:
        out += ["\n## The updates\n", "| iter | " + " | ".join(UPDATE_KEYS) + " |",
                "|---" * (len(UPDATE_KEYS) + 1) + "|"]
        out += ["| " + " | ".join([str(u["iter"])] + ["-" if u[k] is None else f"{u[k]:.4g}"
                                                      for k in UPDATE_KEYS]) + " |"
                for u in updates]
    return "\n".join(out) + "\n"


def report(run: Path) -> int:
    cfg = read_config(run)
    found = evaluations(run, cfg.run.iterations)
    if "start" not in found or len(found) < 2:
        print(f"{run}: needs the start policy's evaluation and at least one more "
              "(evaluation.at_start and evaluation.every)")
        return 1
    played = {label: read_episodes(folder) for label, (_, folder) in found.items()}
    rows = paired_rows(played, "start")
    bets = {label: kuhn_bet_rates(eps) for label, eps in played.items()}
    facing = {label: kuhn_bet_rates(eps, facing=True) for label, eps in played.items()}
    states = {label: kuhn_state_rates(eps) for label, eps in played.items()}
    optimal = {label: ttt_optimal_rates(eps) for label, eps in played.items()}
    allocations = {label: blotto.allocation_rates(eps) for label, eps in played.items()}
    updates = update_stats(run, cfg.run.iterations)
    steps = {label: (k, stage_minutes(run, k)) for label, (k, _) in found.items()}
    exp = exploitability_by_policy(found)
    out = run / "learning"
    out.mkdir(exist_ok=True)
    last = list(found)[-1]
    learning_curve_plot(rows, steps, out / "learning_curve.png",
                        title=f"{run.name}: normalized return per evaluation (95% bands)")
    lines = verdicts(rows, last)
    table = paired_markdown(rows, "start")
    stats = stats_markdown({"all decisions": bets, "facing a bet (bet = call)": facing}, updates)
    plotted = exploitability_plot(exp, steps, out / "exploitability.png",
                                  f"{run.name}: exploitability per evaluation")
    peaks = memory_peaks(run)
    stats = (exploitability_markdown(exp, steps) + states_markdown(states)
             + optimal_markdown(optimal)
             + blotto_markdown(allocations) + stats + memory_markdown(peaks))
    from mars_core.models.precision import cpu_description

    machine = f"Reported on: {cpu_description()}\n\n"
    (out / "learning.md").write_text(f"# {run.name}\n\n{machine}{table}\n" + "\n".join(lines)
                                     + "\n" + stats)
    (out / "learning.json").write_text(json.dumps(
        {"rows": rows, "steps": steps, "verdicts": lines, "kuhn_bet_rates": bets,
         "kuhn_call_rates": facing, "kuhn_state_rates": states, "ttt_optimal_rates": optimal,
         "blotto_allocations": allocations, "updates": updates, "exploitability": exp,
         "memory_peak_gib": peaks, "machine": cpu_description()}, indent=1))
    for name in ("learning_curve.png", "learning.md", "learning.json",
                 *(["exploitability.png"] if plotted else [])):
        log_artifacts(run, out / name, "learning")
    for label, (k, _) in found.items():
        log_metrics_once(run, {
            f"learning/{r['game']}/{r['opponent']}/{key}": r[src]
            for r in rows if r["policy"] == label
            for key, src in (("normalized_return", "normalized_return"),
                             ("paired_diff", "diff"), ("paired_diff_ci95", "diff_ci95"))}
            | {f"learning/kuhn_poker/bet_rate_{card}": rate
               for card, (rate, _) in bets[label].items()}
            | {f"learning/kuhn_poker/call_rate_{card}": rate
               for card, (rate, _) in facing[label].items()}
            | {f"learning/tic_tac_toe/optimal_rate_{kind}": rate
               for kind, (rate, _) in optimal[label].items()}
            | {f"learning/colonel_blotto/{kind}": rate
               for kind, (rate, _) in allocations[label].items()}
            | {f"learning/{game}/exploitability": r["exploitability"]
               for game, r in exp.get(label, {}).items()}, k)
    print(table)
    print(stats)
    print("\n".join(lines))
    print(f"training time (warm-up, rollouts, updates; evaluations left out): "
          f"{steps[last][1]:.1f} min to {last}; curve: {out / 'learning_curve.png'}")
    return 0


def run_main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a learning recipe (configs/learning/)")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--run-name", default=None, help="default: the recipe's file name")
    p.add_argument("--no-train", action="store_true", help="report on the run as it stands")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config overrides, as for mars train")
    args = p.parse_args()
    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    run = Path(args.runs_dir) / (args.run_name or Path(args.config).stem)
    if not args.no_train:
        started = time.perf_counter()
        rc = mars(["train", "--config", args.config, "--runs-dir", args.runs_dir,
                   "--run-name", run.name, *[a for s in args.set for a in ("--set", s)]])
        if rc:
            return rc
        print(f"mars train: {(time.perf_counter() - started) / 60:.1f} min of wall time "
              "(this call, evaluations included)")
    return report(run)


if __name__ == "__main__":
    sys.exit(run_main())
