"""The suite's statistics: Wilson intervals, the paired difference that decides promotions,
the Table 1 layout, and records that keep gated questions out of files."""
from __future__ import annotations

import json

import pytest

from eval.mas import (comparison_table, decide, markdown, paired_difference, read_records,
                           game_eval_difference, summarize, wilson, write_records)
from eval.systems import Result


def res(system, bench, qid, correct, **kw):
    return Result(system, bench, qid, "18", "\\boxed{18}" if correct else "", "answered", 1,
                  calls=2, prompt_tokens=10, completion_tokens=5, correct=correct, **kw)


def test_wilson_interval_known_values():
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-3)
    lo, hi = wilson(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-3), pytest.approx(0.7634, abs=1e-3))
    assert wilson(10, 10)[1] == pytest.approx(1.0) and wilson(0, 0) == (0.0, 1.0)


def test_summary_rows_per_system_and_benchmark():
    rows = summarize([res("single", "gsm8k", str(i), i < 3) for i in range(4)]
                     + [res("mad", "gsm8k", "0", False)])
    single = next(r for r in rows if r["system"] == "single")
    assert (single["n"], single["correct"], single["accuracy"]) == (4, 3, 75.0)
    assert single["ci_low"] < 75.0 < single["ci_high"] and single["calls"] == 8
    assert single["prompt_tokens"] == 40 and single["stops"] == {"answered": 4}


def test_paired_cells_say_per_system_and_benchmark_what_changed():
    """Issue 32: a trained model against its start, per system and benchmark, paired by
    question, with intervals: a clear gain reads better, a tie reads no measurable change."""
    from eval.mas import paired_cells, paired_cells_markdown

    start = [res(s, b, str(i), i % 2 == 0) for s in ("single", "mad") for b in ("gsm8k", "aqua")
             for i in range(40)]
    # single/gsm8k: 30 more right answers; everything else the same answers
    final = [res(r.system, r.benchmark, r.id,
                 r.correct or (r.system, r.benchmark) == ("single", "gsm8k")) for r in start]
    rows = {(r["system"], r["benchmark"]): r for r in paired_cells(final, start)}
    assert set(rows) == {("single", "gsm8k"), ("single", "aqua"), ("mad", "gsm8k"),
                         ("mad", "aqua"), ("single", "all"), ("mad", "all"), ("all", "all")}
    gain = rows[("single", "gsm8k")]
    assert (gain["n"], gain["difference"], gain["reading"]) == (40, 50.0, "a better")
    tie = rows[("mad", "aqua")]
    assert (tie["difference"], tie["reading"]) == (0.0, "no measurable change")
    assert tie["ci95"] > 0  # a tie still has its interval
    assert rows[("all", "all")]["n"] == 160
    table = paired_cells_markdown(paired_cells(final, start), "final", "start")
    assert "| single | gsm8k | 40 | +50.0 ± " in table and "| final better |" in table
    assert "no measurable change" in table


def test_paired_difference_wins_only_beyond_the_interval():
    base = [res("single", "gsm8k", str(i), False) for i in range(40)]
    better = [res("single", "gsm8k", str(i), i < 20) for i in range(40)]
    d = paired_difference(better, base)
    assert d["n"] == 40 and d["difference"] == pytest.approx(50.0) and d["wins"]
    slightly = [res("single", "gsm8k", str(i), i < 2) for i in range(40)]
    d = paired_difference(slightly, base)
    assert 0 < d["difference"] < d["ci95"] and not d["wins"] and not d["loses"]
    assert paired_difference(base, better)["loses"]
    # only questions both answered count
    assert paired_difference(better[:5], base)["n"] == 5


def test_four_questions_all_won_are_no_win_at_n4():
    """4 of 4 right against 4 of 4 wrong: every paired difference is +1, so the sample has no
    spread, but 4 questions cannot clear the bar (the exact sign test needs 6); 6 of 6 can."""
    d = paired_difference([res("single", "gsm8k", str(i), True) for i in range(4)],
                          [res("single", "gsm8k", str(i), False) for i in range(4)])
    assert d["difference"] == 100.0 and d["ci95"] > 100.0
    assert not d["wins"] and not d["loses"]
    six = paired_difference([res("single", "gsm8k", str(i), True) for i in range(6)],
                            [res("single", "gsm8k", str(i), False) for i in range(6)])
    assert six["wins"] and 0 < six["ci95"] < 100.0
    promote, why = decide(d, None)
    assert not promote and "Student-t" in why and "4 paired questions" in why
    promote, why = decide(six, None)
    assert promote and "Student-t" in why and "6 paired questions" in why


def test_comparison_table_has_table1_layout_with_deltas():
    rows = {"model": summarize([res("single", "gsm8k", "0", True), res("single", "aqua", "0",
                                                                       False)]),
            "baseline": summarize([res("single", "gsm8k", "0", False),
                                   res("single", "aqua", "0", False)])}
    table = comparison_table(rows, "baseline")
    assert [t["model"] for t in table] == ["model", "baseline", "model - baseline"]
    assert table[0]["gsm8k"] == 100.0 and table[0]["avg"] == 50.0
    assert table[2]["avg"] == 50.0 and table[2]["aqua"] == 0.0
    md = markdown(table)
    assert md.splitlines()[0] == "| model | system | aqua | gsm8k | avg |"
    assert "| model - baseline | single | 0.0 | 100.0 | 50.0 |" in md


def test_game_eval_difference_and_the_promotion_rule():
    a = [{"game": "tic_tac_toe", "opponent": "bot:mcts-10", "seat": s, "normalized_return": 80.0,
          "normalized_ci95": 5.0} for s in (0, 1)]
    b = [dict(r, normalized_return=50.0) for r in a]
    d = game_eval_difference(a, b)
    assert d["difference"] == pytest.approx(30.0) and d["wins"]
    assert game_eval_difference(b, a)["loses"]
    assert decide(None, None) == (True, "no champion yet")
    win = {"difference": 10.0, "ci95": 4.0, "wins": True, "loses": False}
    tie = {"difference": 1.0, "ci95": 4.0, "wins": False, "loses": False}
    assert decide(win, None)[0] and decide(win, d)[0]
    assert not decide(tie, None)[0]
    assert not decide(win, game_eval_difference(b, a))[0]  # reasoning win, strategic loss


def test_records_round_trip_and_gated_text_never_written(tmp_path):
    secret = "Made-up gated question text"
    gated = res("single", "gpqa_diamond", "rec1", True,
                transcript=[{"agent": "single", "prompt": secret, "reply": "\\boxed{A}",
                             "finish_reason": "stop", "error": ""}])
    gated.prediction = "\\boxed{A} because " + secret
    open_q = res("single", "gsm8k", "7", True,
                 transcript=[{"agent": "single", "prompt": "Janet", "reply": "\\boxed{18}",
                              "finish_reason": "stop", "error": ""}])
    files = write_records([gated, open_q], tmp_path, {"gpqa_diamond"})
    assert [f.relative_to(tmp_path).as_posix() for f in files] == ["single/gpqa_diamond.jsonl",
                                                                    "single/gsm8k.jsonl"]
    assert secret not in (tmp_path / "single" / "gpqa_diamond.jsonl").read_text()
    back = {r.benchmark: r for r in read_records(tmp_path)}
    assert back["gpqa_diamond"].correct and back["gpqa_diamond"].transcript[0]["agent"] == "single"
    assert back["gsm8k"].transcript[0]["prompt"] == "Janet"
    assert json.loads(files[1].read_text())["id"] == "7"
