"""A run's learning curve, read from its finished evaluations: the policies evaluated (the
start and every `evaluation.every`-th checkpoint, all on the same deals), the minutes of
training behind each, their exact exploitability where it was measured, and the pictures and
words made of them. `make learn`'s report (bench/learning.py) and the training flow's last
stage (`tasks.strength.compare_start_final`: what `make demo` ends with) both use it."""
from __future__ import annotations

from pathlib import Path

from mars_core.rollout.reports import exploitability_plot, learning_curve_plot
from mars_core.run.commit import is_done, read_json
from mars_core.run.layout import EVALUATE, INIT, METRICS_FILE, iter_dir, read_episodes, stage_dir
from mars_core.strength.suite import paired_rows

LEARNING_CURVE_PNG = "learning_curve.png"
EXPLOITABILITY_PNG = "exploitability.png"
# what a reader compares a Kuhn Poker exploitability with (exact, mars_core.strength tests)
REFERENCES = {"kuhn_poker": "uniform play 0.458, always bet 0.333",
              "leduc_poker": "uniform play 2.374"}


def stage_minutes(run: Path, upto: int) -> float:
    """Minutes the run's stages took up to iteration `upto` (the warm-up included, the
    evaluations left out: they measure, they do not train)."""
    total = 0.0
    folders = [Path(run) / INIT] + [iter_dir(run, k) for k in range(upto)]
    for folder in folders:
        for metrics in folder.glob(f"*/{METRICS_FILE}"):
            if metrics.parent.name != EVALUATE:
                total += sum(v for k, v in read_json(metrics).items() if k.startswith("time/"))
    return total / 60


def evaluations(run: Path, iterations: int) -> dict[str, tuple[int, Path]]:
    """Finished evaluations: label -> (iterations trained, stage folder), start first."""
    found = {}
    start = stage_dir(run, INIT, EVALUATE)
    if is_done(start):
        found["start"] = (0, start)
    for k in range(iterations):
        folder = stage_dir(run, k, EVALUATE)
        if is_done(folder):
            found[f"iter {k + 1}"] = (k + 1, folder)
    return found


def exploitability_by_policy(found: dict[str, tuple[int, Path]]) -> dict[str, dict[str, dict]]:
    """label -> game -> the evaluation's exact exploitability figures (`exploitability_<game>
    .json` beside its episodes: `mars_core.strength.exploitability`), the table left out."""
    out: dict[str, dict[str, dict]] = {}
    for label, (_, folder) in found.items():
        for file in sorted(folder.glob("exploitability_*.json")):
            r = read_json(file)
            out.setdefault(label, {})[r["game"]] = {k: v for k, v in r.items() if k != "policy"}
    return out


def draw_curves(run: Path, iterations: int, out: Path) -> list[str]:
    """The run's curves as pictures in `out`: `learning_curve.png` (normalized return per
    evaluated policy with its 95% band, paired against the start) and, where exploitability
    was measured, `exploitability.png` against minutes of training. Returns the files drawn
    (none before two evaluations)."""
    found = evaluations(run, iterations)
    if "start" not in found or len(found) < 2:
        return []
    rows = paired_rows({label: read_episodes(folder) for label, (_, folder) in found.items()},
                       "start")
    steps = {label: (k, stage_minutes(run, k)) for label, (k, _) in found.items()}
    learning_curve_plot(rows, steps, out / LEARNING_CURVE_PNG,
                        title=f"{Path(run).name}: normalized return per evaluation (95% bands)")
    drawn = [LEARNING_CURVE_PNG]
    if exploitability_plot(exploitability_by_policy(found), steps, out / EXPLOITABILITY_PNG,
                           f"{Path(run).name}: exploitability per evaluation (exact)"):
        drawn.append(EXPLOITABILITY_PNG)
    return drawn


def exploitability_words(run: Path, iterations: int, trained_by: dict[str, str]) -> list[str]:
    """One sentence per game whose exploitability was read at the start and at the last
    evaluation: from what to what, after how many iterations of what (`trained_by`: game ->
    "self-play" or "play against bot:random", ...), and what to compare it with."""
    found = evaluations(run, iterations)
    exp = exploitability_by_policy(found)
    if "start" not in exp or len(exp) < 2:
        return []
    last = list(exp)[-1]
    lines = []
    for game, first in exp["start"].items():
        end = exp[last].get(game)
        if end is None:
            continue
        a, b = first["exploitability"], end["exploitability"]
        change = f"down {(a - b) / a:.0%}" if b < a else f"up {(b - a) / a:.0%}" if a else "-"
        lines.append(f"{game}: exploitability {a:.3f} -> {b:.3f} after {found[last][0]} "
                     f"iterations of {trained_by.get(game, 'training')} ({change}; exact, read "
                     f"from the policy's own probabilities, no sampling noise; 0 is an "
                     f"equilibrium, {REFERENCES.get(game, 'lower is better')})")
        if game == "kuhn_poker":  # the tables themselves, from the two readings' files
            a_table, b_table = (read_json(found[label][1] / f"exploitability_{game}.json")
                                .get("policy", {}) for label in ("start", last))
            lines.append(kuhn_words(a_table, b_table))
    return lines


# Kuhn Poker's situations (an information state's key is the card, 0-2 for J-K, then the
# bets so far: p a pass, b a bet) and what its second action (<BET>) does there
KUHN_SITUATIONS = {"": "opening, it bets", "p": "after a pass, it bets",
                   "b": "facing a bet, it calls", "pb": "facing a bet after its pass, it calls"}


def kuhn_words(start: dict[str, list[float]], end: dict[str, list[float]]) -> str:
    """What changed, in words, between two Kuhn policy tables (key -> probabilities): each
    situation's <BET> probability over the three cards, start -> end, and how much the card
    changes it at the end (a policy that ignores its card is at least 0.333 exploitable)."""
    parts, spread = [], 0.0
    for history, words in KUHN_SITUATIONS.items():
        keys = [f"{card}{history}" for card in "012" if f"{card}{history}" in end]
        if not keys or not all(k in start for k in keys):
            continue
        a = sum(start[k][1] for k in keys) / len(keys)
        b = sum(end[k][1] for k in keys) / len(keys)
        spread = max(spread, max(end[k][1] for k in keys) - min(end[k][1] for k in keys))
        parts.append(f"{words} {a:.0%} -> {b:.0%}")
    card = (f"its card changes that by {spread:.0%} at most: it has not learnt to read its card "
            "yet (a policy that ignores it cannot go below 0.333; `make learn` runs the "
            "recipe that does)" if spread < 0.2 else
            f"its card changes that by up to {spread:.0%}")
    return "what changed (mean over J, Q, K): " + "; ".join(parts) + f"; {card}"
