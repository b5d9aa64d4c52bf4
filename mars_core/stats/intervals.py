"""Small-sample 95% intervals for bounded outcomes: the game evaluation's cells and
paired differences, and the reasoning benchmarks' accuracies."""
from __future__ import annotations

import math

PSEUDO_OUTCOMES = 2  # at each bound, for the variance floor of `mean_ci95`


def mean_ci95(values: list[float],
              bounds: tuple[float, float] | None = None) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval: Student's t with n - 1 degrees
    of freedom (at n = 4 the factor is 3.18, not the normal 1.96; at n = 1000, 1.96).

    With `bounds` (lo, hi), the outcomes' range (a game's utility range, 0-100 for normalized
    returns, twice the range for paired differences), the variance is at least that of the
    sample pooled with 2 pseudo-outcomes at lo and 2 at hi: Agresti-Coull's "add two successes
    and two failures", carried to bounded outcomes. A cell whose outcomes all agree (4 wins of
    4) so keeps an honest width at small n (a Bernoulli(0.9) mean is covered 99% of the time at
    n = 4-10, by t alone 34-65%; unanimous paired wins clear 0 from 6 games on, as in the exact
    sign test), and as the floor fades like 1/n the interval is Student's at large n. (A Wilson
    floor on the rescaled mean assumes 0/1 outcomes: about twice too wide at any n with draws
    and for paired differences.) The half-width is capped at hi - lo, and is hi - lo for fewer
    than 2 values. Without bounds: plain Student's t (zero width when the values agree)."""
    from scipy.stats import t as student_t

    n = len(values)
    if bounds is not None and n < 2:  # nothing known: the whole range
        lo, hi = bounds
        return (values[0] if n else (lo + hi) / 2), hi - lo
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    if bounds is not None:
        lo, hi = bounds
        pooled = [*values, *[lo] * PSEUDO_OUTCOMES, *[hi] * PSEUDO_OUTCOMES]
        centre = sum(pooled) / len(pooled)
        var = max(var, sum((v - centre) ** 2 for v in pooled) / (len(pooled) - 1))
    half = float(student_t.ppf(0.975, n - 1)) * math.sqrt(var / n)
    return mean, half if bounds is None else min(half, bounds[1] - bounds[0])
