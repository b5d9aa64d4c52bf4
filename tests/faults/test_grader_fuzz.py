"""Hostile grader input: N seeded replies (numbers, fractions, LaTeX, random unicode, power and
factorial towers, nesting 50,000 deep, megabyte replies, huge boxed contents, broken LaTeX,
answers in prose; bench/grader_fuzz.py makes them) graded from worker threads, as Prefect
grades them. Not one call may hang (each returns within its bound) or raise.

`make test` grades a slice (MARS_FUZZ_N, default 300); `MARS_FUZZ_N=10000` is the full run.
"""
from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from eval import graders
from eval.benchmarks import SHIPPED
from tests.conftest import REPO

N = int(os.environ.get("MARS_FUZZ_N", "300"))
THREADS = 4
MARGIN_S = 10.0  # a helper's restart on a busy machine

pytestmark = pytest.mark.timeout(300 + N)


def _fuzz():
    """bench/grader_fuzz.py as a module (its generator and its bound)."""
    spec = importlib.util.spec_from_file_location("grader_fuzz", REPO / "bench/grader_fuzz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the references come from the math benchmarks' files: a clone without them skips, as every
# test that reads them does (tests/benchmark_files.py)
@pytest.mark.benchmarks(*(b for b in SHIPPED if b not in graders.CHOICE_BENCHMARKS))
def test_hostile_replies_never_hang_or_raise_in_worker_threads():
    fuzz = _fuzz()
    bound = fuzz.call_bound(THREADS, MARGIN_S)
    graders.is_correct("gsm8k", "\\boxed{1}", "1")  # a helper is up before the clock starts
    with ThreadPoolExecutor(THREADS, thread_name_prefix="grader-fuzz") as ex:
        results = list(ex.map(fuzz.grade_one, range(N)))

    families = {family for family, _, _, _ in results}
    assert len(results) == N and (N < 300 or families == set(fuzz.FAMILIES))
    raised = [(i, family, v) for i, (family, _, _, v) in enumerate(results)
              if not isinstance(v, bool)]
    assert not raised, raised[:5]
    slow = [(i, family, round(max(a, b), 2)) for i, (family, a, b, _) in enumerate(results)
            if max(a, b) > bound]
    assert not slow, f"{len(slow)} calls over {bound:g} s: {slow[:5]}"
