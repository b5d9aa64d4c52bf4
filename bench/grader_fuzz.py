"""The graders against hostile replies: N seeded answers (numbers, fractions, LaTeX, random
unicode, power towers, factorial towers, nesting up to 50,000 deep, megabyte replies, huge
boxed contents, broken LaTeX, answers in prose) graded from worker threads, as Prefect grades
them. Prints how many answers, hangs (a call over the bound), timeouts hit, exceptions, the
p50/p99/max seconds per answer (its `is_correct`; `extracted_answer` is called and bounded
too) and the total wall time.

    python bench/grader_fuzz.py [--n 10000] [--threads 4] [--seed 0]

The bound on one call is its own timeout, plus a turn waiting for a busy helper when there
are more threads than helpers, plus `--margin` seconds for a helper's restart. `answer(i, seed)`
is also the generator of tests/faults/test_grader_fuzz.py.
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mars_core.run.threads  # noqa: E402,F401  (first: the thread settings, before torch loads)

from eval import grader_pool, graders  # noqa: E402
from eval.benchmarks import BENCHMARKS, LETTERS, SHIPPED, load  # noqa: E402

MATH = [b for b in SHIPPED if b not in graders.CHOICE_BENCHMARKS]
MB = 1 << 20


def _number(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return str(rng.randint(-1000, 1000))
    if kind == 1:
        return f"{rng.uniform(-1e4, 1e4):.{rng.randint(0, 6)}f}"
    if kind == 2:
        return str(rng.getrandbits(rng.randint(1, 200)))
    if kind == 3:
        return f"{rng.randint(1, 999)},{rng.randint(0, 999):03d}"
    return f"{rng.randint(1, 99)}\\%"


def _fraction(rng: random.Random) -> str:
    a, b = rng.randint(-50, 50), rng.randint(1, 99)
    return rng.choice([f"\\frac{{{a}}}{{{b}}}", f"{a}/{b}", f"\\dfrac{{{a}}}{{{b}}}",
                       f"{rng.randint(1, 9)}\\frac{{{abs(a)}}}{{{b}}}", f"-\\frac{{{b}}}{{{a}}}"])


def _latex(rng: random.Random) -> str:
    n = rng.randint(1, 20)
    return rng.choice([f"{n}\\sqrt{{{rng.randint(2, 50)}}}", f"\\frac{{{n}\\pi}}{{{n + 1}}}",
                       f"\\left( {n}, \\frac{{\\pi}}{{{n}}} \\right)", f"[{-n}, {n})",
                       f"\\begin{{pmatrix}} {n} \\\\ {-n} \\end{{pmatrix}}", f"{n} - {n}i",
                       "\\text{Evelyn}", f"x^{{{n}}} + {n}x", f"{n}^\\circ", f"e^{{{n}}}",
                       f"\\log_{{{n + 1}}} {n}", f"x \\in (-\\infty, {n}]", f"{n}!",
                       f"\\binom{{{n + 5}}}{{{n}}}", f"\\sqrt[3]{{{n}}}"])


def _unicode(rng: random.Random) -> str:
    ranges = [(0x20, 0x7E), (0xA0, 0x2FF), (0x370, 0x3FF), (0x400, 0x4FF), (0x2200, 0x22FF),
              (0x4E00, 0x4FFF), (0x1F300, 0x1F6FF), (0x300, 0x36F), (0x0, 0x1F), (0xD800, 0xDFFF)]
    out = []
    for _ in range(rng.randint(0, 300)):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def _tower(rng: random.Random) -> str:
    height = rng.randint(3, 6)
    base = str(rng.randint(2, 99))
    latex = base
    for _ in range(height - 1):
        latex = f"{base}^{{{latex}}}"
    return rng.choice([latex, "**".join([base] * height), "^".join([base] * height),
                       "10^{10^{10^{10}}}", "9**9**9**9", f"2^{{{rng.randint(10**7, 10**12)}}}"])


def _factorial(rng: random.Random) -> str:
    n = rng.randint(10, 200)
    return rng.choice([f"(({n}!)!)!", f"({n}!)!", f"\\left({n}!\\right)!",
                       f"{rng.randint(10**6, 10**12)}!", f"{n}" + "!" * rng.randint(3, 40),
                       f"\\Gamma({10**rng.randint(5, 12)})"])


def _nested(rng: random.Random) -> str:
    depth = rng.choice([20, 30, 70, 500, 5000, 50_000])
    opener, closer = rng.choice([("{", "}"), ("(", ")"), ("[", "]"), ("\\sqrt{", "}"),
                                 ("\\frac{1}{", "}"), ("\\left(", "\\right)"), ("x^{", "}")])
    inner = opener * depth + str(rng.randint(1, 9)) + closer * depth
    return rng.choice([inner, f"\\boxed{{{inner}}}", f"The answer is ${inner}$.",
                       opener * depth])  # the last one never closes


def _megabyte(rng: random.Random, answer: str) -> str:
    unit = rng.choice(["Let me think about this again. ", "1+", "9", " ", "\n", "$", "\\boxed{",
                       "<think>", "</think>", "answer ", "\\frac{1}{2}", "((((", "x^{2}",
                       "The answer is 42. ", "\\left(", "}", "**", "A) "])
    text = unit * (MB // len(unit))
    return text + rng.choice(["", f" \\boxed{{{answer}}}", f"The answer is {answer}."])


def _huge_boxed(rng: random.Random) -> str:
    size = rng.choice([10_000, 100_000, MB])
    body = rng.choice(["1+", "x", "9", "\\frac{1}{2}+", "{}", "a\\cdot "])
    return "\\boxed{" + body * (size // len(body)) + "}"


def _broken_latex(rng: random.Random) -> str:
    soup = ["\\frac", "\\sqrt", "{", "}", "^", "_", "\\left(", "\\right)", "$", "$$", "\\begin{",
            "pmatrix}", "\\end{", "&", "\\\\", "\\boxed{", "\\text{", "\\", "%", "#", "~",
            "\\int", "\\sum_{", "\\lim", "\\infty", "\\cdot", "=", "\\pm", "1", "x", " "]
    return "".join(rng.choice(soup) for _ in range(rng.randint(1, 400)))


def _near_miss(rng: random.Random) -> str:
    """Explosive in ways the cheap pre-filters do not see: left to the helper's timer."""
    k = rng.randint(25, 40)
    return rng.choice(["\\boxed{" + "\\frac{1}{" * k + "2" + "}" * k + "}",
                       "The answer is (10^10)^(10^10)", "\\boxed{\\binom{10^{10}}{10^5}}",
                       "\\boxed{{10^{10}}^{10^{10}}}"])


def _prose(rng: random.Random, answer: str, other: str) -> str:
    return rng.choice([f"The answer is {answer}.", f"So the final answer is {answer}",
                       f"Answer: {answer}", f"Therefore, x = {answer}.",
                       f"I tried {other} but the answer is {answer}",
                       f"<think>maybe {other}</think>\nThe answer is ${answer}$.",
                       f"We have {other} and {answer}. The answer is clearly {answer}!",
                       f"**Final Answer:** {answer}", f"\\boxed{{{answer}}}",
                       f"<think>never closed {answer}"])


_REFERENCES: dict[str, list[str]] = {}


def _reference(rng: random.Random, bench: str) -> str:
    if bench in graders.CHOICE_BENCHMARKS:
        return rng.choice(LETTERS[:4])
    if bench not in _REFERENCES:
        _REFERENCES[bench] = [q.reference for q in load(bench)]
    return rng.choice(_REFERENCES[bench])


FAMILIES = {  # name -> weight (of 100)
    "number": 12, "fraction": 8, "latex": 10, "unicode": 8, "prose": 20, "tower": 6,
    "factorial": 5, "nested": 8, "megabyte": 4, "huge_boxed": 4, "broken_latex": 12,
    "near_miss": 3,
}


def answer(i: int, seed: int = 0) -> tuple[str, str, str, str]:
    """The `i`-th fuzz answer of `seed`: (family, benchmark, reply, reference), built on demand
    (a megabyte reply is only made when it is graded)."""
    rng = random.Random(seed * 1_000_003 + i)
    family = rng.choices(list(FAMILIES), weights=list(FAMILIES.values()))[0]
    bench = rng.choice(MATH * 3 + list(graders.CHOICE_BENCHMARKS))
    reference = _reference(rng, bench)
    plain = rng.choice([_number, _fraction, _latex])(rng)
    reply = {
        "number": lambda: _number(rng), "fraction": lambda: _fraction(rng),
        "latex": lambda: _latex(rng), "unicode": lambda: _unicode(rng),
        "prose": lambda: _prose(rng, rng.choice([reference, plain]), plain),
        "tower": lambda: _tower(rng), "factorial": lambda: _factorial(rng),
        "nested": lambda: _nested(rng), "megabyte": lambda: _megabyte(rng, reference),
        "huge_boxed": lambda: _huge_boxed(rng), "broken_latex": lambda: _broken_latex(rng),
        "near_miss": lambda: _near_miss(rng),
    }[family]()
    if family in ("number", "fraction", "latex", "tower", "factorial") and rng.random() < 0.5:
        reply = rng.choice([f"\\boxed{{{reply}}}", f"The answer is {reply}.", f"$${reply}$$"])
    assert bench in BENCHMARKS
    return family, bench, reply, reference


def grade_one(i: int, seed: int = 0) -> tuple[str, float, float, object]:
    """Grade answer `i` as a caller does (is_correct, then extracted_answer for the
    transcript): (family, seconds of each call, the verdict or the exception raised)."""
    family, bench, reply, reference = answer(i, seed)
    try:
        start = time.perf_counter()
        verdict = graders.is_correct(bench, reply, reference)
        graded = time.perf_counter()
        graders.extracted_answer(bench, reply)
    except Exception as e:  # noqa: BLE001 - counted, never expected
        verdict, graded = e, time.perf_counter()
    return family, graded - start, time.perf_counter() - graded, verdict


def call_bound(threads: int, margin: float) -> float:
    """Seconds one grader call may take: the timeout, after waiting for a busy helper's turn
    (threads beyond the helpers queue), plus `margin` for a helper's restart."""
    workers = len(grader_pool._pool().workers)
    return grader_pool.grader_timeout() * (1 + math.ceil(threads / workers - 1)) + margin


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--margin", type=float, default=10.0)
    args = ap.parse_args()

    bound = call_bound(args.threads, args.margin)
    graders.is_correct("gsm8k", "\\boxed{1}", "1")  # start a helper before the clock
    start = time.perf_counter()
    with ThreadPoolExecutor(args.threads, thread_name_prefix="grader-fuzz") as ex:
        results = list(ex.map(lambda i: grade_one(i, args.seed), range(args.n)))
    wall = time.perf_counter() - start

    seconds = sorted(s for _, s, _, _ in results)
    extract_max = max((s for _, _, s, _ in results), default=0.0)
    errors = [(f, v) for f, _, _, v in results if isinstance(v, Exception)]
    stats = grader_pool.grader_stats()
    by_family: dict[str, list[float]] = {}
    for family, s, _, _ in results:
        by_family.setdefault(family, []).append(s)
    print(f"answers        {len(results)} ({args.threads} threads, "
          f"{len(grader_pool._pool().workers)} helpers, timeout {grader_pool.grader_timeout():g} s, "
          f"bound {bound:g} s per answer)")
    print(f"hangs          {sum(max(a, b) > bound for _, a, b, _ in results)}")
    print(f"exceptions     {len(errors)}" + (f" (first: {errors[0]!r})" if errors else ""))
    print(f"timeouts hit   {stats['timeout'] + stats['killed']} (helper timer "
          f"{stats['timeout']}, helper killed {stats['killed']}, helper died {stats['died']}) "
          f"of {stats['calls']} helper calls")
    print(f"right          {sum(v is True for _, _, _, v in results)}")
    print(f"seconds/answer p50 {statistics.median(seconds):.4f}  "
          f"p99 {seconds[int(0.99 * (len(seconds) - 1))]:.3f}  max {seconds[-1]:.3f}  "
          f"(extracted_answer max {extract_max:.3f})")
    print(f"total wall     {wall:.1f} s")
    for family, secs in sorted(by_family.items()):
        print(f"  {family:13} n={len(secs):5}  p50 {statistics.median(secs):.4f}  "
              f"max {max(secs):.3f}")


if __name__ == "__main__":
    main()
