"""The reasoning-benchmark suite: systems x benchmarks for one model, accuracy with a 95%
confidence interval, cost (model calls, tokens), transcripts, and the comparison of two models
(the MARS paper's Table 1 layout, and a paired difference for promotion decisions).

Accuracy intervals are Wilson score intervals (honest at small n and at 0% or 100%). The
difference of two models is paired over the same questions: mean of (a_i - b_i) with the
project's small-sample 95% interval for bounded outcomes (`mars_core.stats.intervals.mean_ci95`:
Student's t, its variance floored so that 4 wins out of 4 still has a width), so "wins by more
than the confidence interval" means its lower end is above 0.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from eval.benchmarks import Question
from eval.journal import Journal, fingerprint, is_journal
from eval.systems import Result, run_system
from mars_core.engines.chat import ChatEngine, ChatParams
from mars_core.stats.intervals import mean_ci95
from mars_core.privacy.redact import redact

Z95 = 1.959964


def wilson(correct: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion correct/n ((0, 1) when n == 0)."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + Z95 ** 2 / (2 * n)) / (1 + Z95 ** 2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / (1 + Z95 ** 2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def run_suite(engine: ChatEngine, systems: list[str], questions: list[Question],
              params: ChatParams, max_batch: int = 256,
              progress: Callable[[str], None] | None = None, journal: Path | None = None,
              model: str = "") -> list[Result]:
    """Every question under every system. A system's questions (all benchmarks) run as one
    lockstep batch, so the engine sees as many concurrent conversations as there are open
    questions. With a `journal` folder, each system keeps its replies in
    `<journal>/<system>.jsonl` (`eval.journal`, fingerprinted with `model`): rerun after a
    kill, the suite replays them and goes on from there."""
    results = []
    for name in systems:
        book = None
        if journal is not None:
            digest = fingerprint(model, name, [(q.benchmark, q.id) for q in questions], params)
            book = Journal(Path(journal) / f"{name}.jsonl", digest,
                           {i for i, q in enumerate(questions) if q.gated})
            if book.size and progress:
                progress(f"{name}: resuming from {book.size} replies in {book.path}")
        try:
            results += run_system(name, questions, engine, params, max_batch, progress, book)
        finally:
            if book is not None:
                book.close()
    return results


def remove_journal(folder: Path) -> None:
    """Delete the journals `run_suite` wrote under `folder` (once the results are written),
    and only them: `*.jsonl` and set-aside `*.jsonl.other` files that open with a journal's
    header (`eval.journal`), then the folders they leave empty. Anything else stays."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for pattern in ("*.jsonl", "*.jsonl.other"):
        for path in folder.rglob(pattern):
            if is_journal(path):
                path.unlink()
    for sub in sorted((d for d in folder.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        if not any(sub.iterdir()):
            sub.rmdir()
    if not any(folder.iterdir()):
        folder.rmdir()


def summarize(results: list[Result]) -> list[dict]:
    """One row per system x benchmark: n, correct, accuracy (%), Wilson 95% interval (%),
    calls, tokens, errors and how questions ended."""
    cells: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        cells.setdefault((r.system, r.benchmark), []).append(r)
    rows = []
    for (system, bench), rs in cells.items():
        n, k = len(rs), sum(r.correct for r in rs)
        lo, hi = wilson(k, n)
        rows.append({
            "system": system, "benchmark": bench, "n": n, "correct": k,
            "accuracy": 100.0 * k / n, "ci_low": 100.0 * lo, "ci_high": 100.0 * hi,
            "ci95": 50.0 * (hi - lo), "calls": sum(r.calls for r in rs),
            "prompt_tokens": sum(r.prompt_tokens for r in rs),
            "completion_tokens": sum(r.completion_tokens for r in rs),
            "errors": sum(bool(r.errors) for r in rs),
            "stops": dict(Counter(r.stop for r in rs)),
        })
    return rows


def comparison_table(rows: dict[str, list[dict]], baseline: str | None = None) -> list[dict]:
    """Table 1 layout: one row per model x system, one column per benchmark (accuracy %) and
    `avg` (unweighted mean over benchmarks); with a baseline, a `delta` row per system."""
    benches = sorted({r["benchmark"] for rs in rows.values() for r in rs})
    systems = list(dict.fromkeys(r["system"] for rs in rows.values() for r in rs))
    table = []
    for system in systems:
        for label, rs in rows.items():
            acc = {r["benchmark"]: r["accuracy"] for r in rs if r["system"] == system}
            if not acc:
                continue
            line = {"model": label, "system": system, **{b: acc.get(b) for b in benches}}
            line["avg"] = sum(acc.values()) / len(acc)
            table.append(line)
        if baseline and baseline in rows and len(rows) == 2:
            mine = [t for t in table if t["system"] == system]
            if len(mine) == 2:
                base = next(t for t in mine if t["model"] == baseline)
                other = next(t for t in mine if t["model"] != baseline)
                table.append({"model": f"{other['model']} - {baseline}", "system": system,
                              **{c: (other[c] - base[c]) if other[c] is not None
                                 and base[c] is not None else None
                                 for c in [*benches, "avg"]}})
    return table


def markdown(table: list[dict]) -> str:
    """The comparison table as Markdown (accuracy in %, one decimal)."""
    if not table:
        return ""
    cols = list(table[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in table:
        cells = [f"{v:.1f}" if isinstance(v, float) else ("" if v is None else str(v))
                 for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def paired_difference(a: list[Result], b: list[Result]) -> dict:
    """Model a minus model b over the questions both answered (same system, benchmark and
    id): mean difference in accuracy points, its 95% half-width (`mean_ci95` of the
    differences, bounded by -1 and 1), whether a wins (lower end above 0) or loses (upper end
    below 0), and `interval`, which interval that is."""
    right_b = {(r.system, r.benchmark, r.id): r.correct for r in b}
    diffs = [float(r.correct) - float(right_b[k]) for r in a
             if (k := (r.system, r.benchmark, r.id)) in right_b]
    n = len(diffs)
    if n == 0:
        return {"n": 0, "difference": 0.0, "ci95": float("inf"), "wins": False, "loses": False,
                "interval": "no paired questions"}
    mean, half = mean_ci95(diffs, (-1.0, 1.0))
    return {"n": n, "difference": 100.0 * mean, "ci95": 100.0 * half,
            "wins": mean - half > 0, "loses": mean + half < 0,
            "interval": f"95% Student-t interval of {n} paired questions, variance floored "
                        "for outcomes in [-1, 1]"}


def paired_cells(a: list[Result], b: list[Result]) -> list[dict]:
    """`paired_difference` of model a minus model b for each (system, benchmark) both answered,
    then per system over its benchmarks (`benchmark` "all"), then over everything (`system`
    "all"): each row's `reading` is `a better`, `a worse` or `no measurable change` (the 95%
    interval covers 0), so a run on a small model says "no change" with its interval rather
    than hiding it."""
    cells = sorted({(r.system, r.benchmark) for r in a} & {(r.system, r.benchmark) for r in b})
    systems = sorted({s for s, _ in cells})
    groups = [(s, bench, {(s, bench)}) for s, bench in cells]
    if len(cells) > len(systems):
        groups += [(s, "all", {c for c in cells if c[0] == s}) for s in systems]
    if len(systems) > 1:
        groups.append(("all", "all", set(cells)))
    rows = []
    for system, benchmark, members in groups:
        d = paired_difference([r for r in a if (r.system, r.benchmark) in members],
                              [r for r in b if (r.system, r.benchmark) in members])
        reading = "a better" if d["wins"] else "a worse" if d["loses"] else "no measurable change"
        rows.append({"system": system, "benchmark": benchmark, **d, "reading": reading})
    return rows


def paired_cells_markdown(rows: list[dict], a: str, b: str) -> str:
    """`paired_cells` as Markdown: accuracy points of `a` minus `b` with the 95% half-width."""
    lines = [f"| system | benchmark | questions | {a} - {b} (points, paired) | reading |",
             "|---|---|---|---|---|"]
    for r in rows:
        reading = r["reading"].replace("a better", f"{a} better").replace("a worse", f"{a} worse")
        lines.append(f"| {r['system']} | {r['benchmark']} | {r['n']} | "
                     f"{r['difference']:+.1f} ± {r['ci95']:.1f} | {reading} |")
    return "\n".join(lines) + "\n"


# what a gated benchmark's transcript keeps: no question or reply text
_TEXTLESS = ("agent", "finish_reason", "error", "prompt_tokens", "completion_tokens", "start", "end")


def write_records(results: list[Result], folder: Path, gated: set[str]) -> list[Path]:
    """Per system x benchmark: `<system>/<benchmark>.jsonl`, one record per question with its
    transcript. Gated benchmarks (GPQA) keep only ids, outcome and grade: no question or reply
    text ever lands in a file that may become an artifact; secrets (an endpoint's URL
    credentials in an error) are masked (`mars_core.privacy.redact`)."""
    files: dict[Path, list[str]] = {}
    for r in results:
        record = redact(asdict(r))
        if r.benchmark in gated:
            record["prediction"] = ""
            record["transcript"] = [{k: t.get(k) for k in _TEXTLESS} for t in r.transcript]
        files.setdefault(folder / r.system / f"{r.benchmark}.jsonl", []).append(json.dumps(record))
    for path, lines in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    return sorted(files)


def read_records(folder: Path) -> list[Result]:
    """The results `write_records` wrote (for comparisons across runs)."""
    out = []
    for path in sorted(Path(folder).glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(Result(**json.loads(line)))
    return out


def game_eval_difference(a: list[dict], b: list[dict]) -> dict:
    """Game evaluation suite, model a minus model b: the mean normalized return (0-100) over the
    cells both played, with a 95% half-width from the cells' own intervals (`seat_record`'s
    bounded `mean_ci95`; independent games: half-widths add in quadrature, which with
    Student's factors errs wide), and `interval`, which interval that is."""
    key = lambda r: (r["game"], r["opponent"], r["seat"])  # noqa: E731
    other = {key(r): r for r in b}
    pairs = [(r, other[key(r)]) for r in a if key(r) in other]
    if not pairs:
        return {"n": 0, "difference": 0.0, "ci95": float("inf"), "wins": False, "loses": False,
                "interval": "no common cells"}
    k = len(pairs)
    diff = sum(x["normalized_return"] - y["normalized_return"] for x, y in pairs) / k
    half = math.sqrt(sum(x["normalized_ci95"] ** 2 + y["normalized_ci95"] ** 2
                         for x, y in pairs)) / k
    return {"n": k, "difference": diff, "ci95": half, "wins": diff - half > 0,
            "loses": diff + half < 0,
            "interval": f"95% half-widths of the {k} cells (Student-t, variance floored for "
                        "bounded returns), added in quadrature"}


def decide(mas: dict | None, games: dict | None) -> tuple[bool, str]:
    """Promote the candidate when there is no champion yet (`mas` None), or when it wins the
    reasoning suite by more than its confidence interval (`paired_difference`: the lower end
    above 0) and does not lose the game evaluation (when one was played) by more than its own
    (`game_eval_difference`). The reason names the interval each verdict rests on."""
    if mas is None:
        return True, "no champion yet"

    def shown(d: dict, unit: str = "") -> str:
        return (f"{d['difference']:+.1f} ± {d['ci95']:.1f}{unit} "
                f"({d.get('interval', '95% interval')})")

    if not mas["wins"]:
        return False, f"reasoning suite: {shown(mas, ' points')} is not a win beyond the interval"
    if games is not None and games["loses"]:
        return False, f"game evaluation: {shown(games)} is a loss beyond the interval"
    return True, (f"reasoning suite: {shown(mas, ' points')} is a win beyond the interval"
                  + (f"; game evaluation: {shown(games)} is no loss beyond it"
                     if games else ""))
