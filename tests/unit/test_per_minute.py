"""bench/per_minute.py: each run's paired gain at its last evaluation within the minutes, the
gain per hour, and a ratio only to a baseline gain its interval separates from 0."""
from __future__ import annotations

import json
import runpy

from tests.conftest import REPO

BENCH = runpy.run_path(str(REPO / "bench" / "per_minute.py"), run_name="bench")


def _run(tmp_path, name, steps, rows, machine="cpu A"):
    run = tmp_path / name
    (run / "learning").mkdir(parents=True)
    (run / "learning" / "learning.json").write_text(json.dumps({
        "steps": steps, "machine": machine,
        "ttt_optimal_rates": {label: {"decisive": [0.5, 10]} for label in steps},
        "rows": [{"policy": p, "game": "g", "opponent": o, "diff": d, "diff_ci95": c}
                 for p, o, d, c in rows]}))
    return run


def test_the_last_evaluation_within_the_minutes_and_the_ratio_to_a_clear_baseline(tmp_path, capsys):
    base = _run(tmp_path, "base", {"start": [0, 2], "iter 4": [4, 20], "iter 8": [8, 50]},
                [("iter 4", "bot:a", 4.0, 2.0), ("iter 4", "bot:b", 1.0, 3.0),
                 ("iter 8", "bot:a", 9.0, 2.0), ("iter 8", "bot:b", 2.0, 3.0)])
    fast = _run(tmp_path, "fast", {"start": [0, 2], "iter 2": [2, 10], "iter 6": [6, 30]},
                [("iter 2", "bot:a", 4.0, 2.0), ("iter 6", "bot:a", 12.0, 3.0),
                 ("iter 6", "bot:b", 6.0, 3.0)])
    cells, machine = BENCH["gains"](base, 45)
    assert cells["g vs bot:a"][:4] == ("iter 4", 20.0, 4.0, 2.0) and machine == "cpu A"
    assert BENCH["main"](["--minutes", "45", "--baseline", str(base), str(fast)]) == 0
    out = capsys.readouterr().out
    # base: +4 in 20 min = 12/h; fast: +12 in 30 min = 24/h -> 2.0x; bot:b's base gain unclear
    assert "| fast | g vs bot:a | iter 6 | 30.0 | +12.0 ± 3.0 | +24.0 | 2.0x | 50% |" in out
    assert "| fast | g vs bot:b | iter 6 | 30.0 | +6.0 ± 3.0 | +12.0 | no clear baseline gain |" in out
    assert "WARNING" not in out


def test_other_machines_are_flagged_and_an_unreported_run_is_one_line(tmp_path, capsys):
    a = _run(tmp_path, "a", {"start": [0, 1], "iter 1": [1, 5]}, [("iter 1", "bot:a", 1.0, 1.0)])
    b = _run(tmp_path, "b", {"start": [0, 1], "iter 1": [1, 5]}, [("iter 1", "bot:a", 1.0, 1.0)],
             machine="cpu B")
    assert BENCH["main"]([str(a), str(b)]) == 0
    assert "WARNING: the runs ran on different machines" in capsys.readouterr().out
    assert BENCH["main"]([str(a), str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("per_minute:") and "report it first" in err and "\n" not in err
