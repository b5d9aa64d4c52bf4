"""Small-sample 95% intervals (`mars_core.stats.intervals.mean_ci95` with bounds, everything built
on it, and the Wilson interval of accuracies): Student's factor at n = 4, an honest width for
cells whose outcomes all agree, and coverage checked by simulation."""
from __future__ import annotations

import random

import pytest

from eval.mas import paired_difference, wilson
from eval.systems import Result
from mars_core.stats.intervals import mean_ci95
from mars_core.strength.suite import seat_record, paired_rows
from mars_core.types import Episode

T3 = 3.1824  # Student's t, 97.5% quantile, 3 degrees of freedom (n = 4)


def _res(qid: str, correct: bool) -> Result:
    return Result("single", "gsm8k", qid, "18", "", "answered", 1, correct=correct)


def _ttt(eid: str, returns: tuple[float, float]) -> Episode:
    outcomes = tuple("win" if r > 0 else "loss" if r < 0 else "draw" for r in returns)
    return Episode(eid, "tic_tac_toe", 0, ("policy", "bot:random"), returns, outcomes)


def test_all_equal_bounded_outcomes_at_n4_still_have_a_width():
    for value in (1.0, 0.0, -1.0):  # 4 wins, 4 draws, 4 losses out of 4 (returns in [-1, 1])
        mean, half = mean_ci95([value] * 4, (-1.0, 1.0))
        assert mean == value and half > 0.5
    # 4 wins out of 4 happen a quarter of the time at a 70% win rate (mean return 0.4): the
    # interval must not rule it out; it stays inside the range's width
    mean, half = mean_ci95([1.0] * 4, (-1.0, 1.0))
    assert mean - half < 0.4 and half <= 2.0
    # fewer than 2 values: nothing is known, the whole range
    assert mean_ci95([1.0], (-1.0, 1.0)) == (1.0, 2.0)
    assert mean_ci95([], (0.0, 100.0)) == (50.0, 100.0)


def test_records_and_paired_rows_of_four_equal_games_have_a_width():
    won = [_ttt(f"g{i}", (1.0, -1.0)) for i in range(4)]
    r = seat_record("tic_tac_toe", "m", "bot:random", 0, won)
    assert r["normalized_return"] == 100.0 and r["ci95"] > 0
    assert 0 < r["normalized_return"] - r["normalized_ci95"] < 70
    lost = [_ttt(f"g{i}", (-1.0, 1.0)) for i in range(4)]
    base, later = paired_rows({"start": lost, "iter 1": won}, "start")
    assert base["ci95"] > 0 and later["ci95"] > 0
    assert later["diff"] == 100.0 and later["diff_ci95"] > 0
    same, = [r for r in paired_rows({"start": won, "again": won}, "start")
             if r["policy"] == "again"]
    assert same["diff"] == 0.0 and same["diff_ci95"] > 0  # identical games prove nothing at n=4


def test_student_factor_at_n4_not_the_normal_one():
    # the reasoning suite's paired difference: +1, -1, +1, -1 over 4 questions (spread
    # outcomes: the floor does not bind and the factor is Student's)
    a = [_res(str(i), i % 2 == 0) for i in range(4)]
    b = [_res(str(i), i % 2 == 1) for i in range(4)]
    d = paired_difference(a, b)
    assert d["difference"] == 0.0
    assert d["ci95"] == pytest.approx(100 * T3 * (4 / 3 / 4) ** 0.5, rel=1e-4)  # not 1.96
    assert "Student-t" in d["interval"]
    mean, half = mean_ci95([0.0, 1.0, 0.0, 1.0], (0.0, 1.0))
    assert mean == 0.5 and half == pytest.approx(T3 * (1 / 3 / 4) ** 0.5, rel=1e-4)


def test_the_floor_fades_at_large_n_and_never_narrows_student():
    values = [float(i % 2) for i in range(1000)]
    assert mean_ci95(values, (0.0, 1.0))[1] == pytest.approx(mean_ci95(values)[1], rel=1e-9)
    # mostly draws (variance 0.1): the floor adds under 2% at n = 1000
    drawn = [0.0] * 900 + [1.0] * 50 + [-1.0] * 50
    assert mean_ci95(drawn, (-1.0, 1.0))[1] == pytest.approx(mean_ci95(drawn)[1], rel=0.02)
    rng = random.Random(1)
    for n in (2, 3, 4, 7, 20):
        xs = [rng.choice((-1.0, 0.0, 0.5, 1.0)) for _ in range(n)]
        assert mean_ci95(xs, (-1.0, 1.0))[1] >= min(mean_ci95(xs)[1], 2.0) - 1e-12


def _coverage(p: float, n: int, reps: int, rng: random.Random) -> tuple[float, float]:
    """How often a seat's interval (`seat_record`, games won with probability p, else lost)
    and the Wilson interval cover p. Both depend only on the number of wins k: one record
    per k."""
    record = {}
    record_hits = wilson_hits = 0
    for _ in range(reps):
        k = sum(rng.random() < p for _ in range(n))
        if k not in record:
            record[k] = seat_record("tic_tac_toe", "m", "bot:random", 0,
                                    [_ttt(f"g{i}", (1.0, -1.0) if i < k else (-1.0, 1.0))
                                     for i in range(n)])
        r = record[k]
        record_hits += abs(r["normalized_return"] - 100 * p) <= r["normalized_ci95"]
        lo, hi = wilson(k, n)
        wilson_hits += lo <= p <= hi
    return record_hits / reps, wilson_hits / reps


@pytest.mark.parametrize("n", range(4, 11))
def test_coverage_of_a_bernoulli_09_mean_at_small_n(n):
    """2,000 seeded repetitions: a seat's 95% interval covers a 90% win rate at least 93% of
    the time (it measures about 99%; Student's t alone covers it 34% at n = 4, as 4 wins of 4
    happen 66% of the time); Wilson's, at least 90% (it dips to about 92% at n = 5 and 10)."""
    record_cov, wilson_cov = _coverage(0.9, n, 2000, random.Random(1000 + n))
    assert record_cov >= 0.93
    assert wilson_cov >= 0.90


def test_coverage_of_a_paired_difference_with_ties():
    """Paired differences in [-1, 1], mostly ties (true mean 0.1), n = 4..10: the interval of
    `paired_difference` covers the mean at least 93% of the time."""
    rng = random.Random(7)
    for n in range(4, 11):
        hits = 0
        for _ in range(1000):
            a, b = [], []
            for i in range(n):
                u = rng.random()  # +1 with 0.2, -1 with 0.1, a tie otherwise
                a.append(_res(str(i), u < 0.2 or u >= 0.3 and u < 0.65))
                b.append(_res(str(i), 0.2 <= u < 0.3 or u >= 0.3 and u < 0.65))
            d = paired_difference(a, b)
            hits += abs(d["difference"] - 10.0) <= d["ci95"]
        assert hits / 1000 >= 0.93, n
