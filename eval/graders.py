"""Honest grading: a reply is right only when its final answer can be read and matches.

Math answers go through `math-verify` (LaTeX and plain expressions: fractions, radicals,
tuples, units, `27.0` vs `27`); a reply without `\\boxed{}` that states its answer in prose
("The answer is 42.", "Answer: $3\\sqrt{13}$", "Therefore, x = 5.") is graded on the value of
that last statement, as a boxed one would be. Multiple-choice replies go through a letter
extractor that reads `\\boxed{C}`, `The answer is (C)`, `C)`, `(C)` or a bare `C`. Reasoning
blocks (`<think>...</think>`) are dropped first; an unclosed one means the model never
answered. A reply with no readable answer is wrong, never skipped.

Grading is bounded in time in any thread. Only the last `REPLY_TAIL` characters of a reply
are read (its final answer is at its end). Math answers are graded in persistent helper
processes (`MARS_GRADER_WORKERS`, default 2), started with a fresh interpreter (never a fork
of a threaded caller). In a helper's main thread a timer stops any answer after 80% of its
budget (math-verify's own signal timeouts, per step and off outside a main thread, are
replaced by one for the whole answer); the caller waits `MARS_GRADER_TIMEOUT_S` seconds
(default 5) at most, then kills and replaces the helper and counts the answer wrong. Answers
that would blow up (power towers, huge factorials, deep nesting) are wrong without being
tried. Letters are read with regexes on the bounded tail in the caller.

Reading the answer is `eval/answers.py`; the helper processes are `eval/grader_pool.py`.
"""
from __future__ import annotations

from eval.answers import explosive, extract_letter, strip_reasoning, tail
from eval.benchmarks import BENCHMARKS
from eval.grader_pool import _pool, grader_timeout

CHOICE_BENCHMARKS = frozenset({"aqua", "mmlu_stem", "gpqa_diamond"})


def _math_call(op: str, text: str, *args: str):
    """Run `op` on the tail of a stripped reply in a helper, within the timeout; None when
    there is nothing to read, the answer would blow up, or the time ran out."""
    text = tail(text)
    if not text.strip() or explosive(text):
        return None
    timeout = grader_timeout()
    return _pool().call((op, text, *args, max(0.1, 0.8 * timeout)), timeout)


def math_equal(prediction: str, reference: str) -> bool:
    """Whether the reply's final answer equals the reference (math-verify; False when the
    reply holds no answer it can read, or when reading it runs out of time)."""
    return bool(_math_call("grade", strip_reasoning(prediction), reference))


def is_correct(benchmark: str, prediction: str, reference: str) -> bool:
    """Grade one reply of `benchmark` against its reference answer (see the module docstring).
    Never raises for a reply: anything unreadable is simply wrong."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}")
    try:
        if benchmark in CHOICE_BENCHMARKS:
            n = 4 if benchmark in ("mmlu_stem", "gpqa_diamond") else 5
            return extract_letter(prediction or "", n) == reference.strip().upper()
        return math_equal(prediction or "", reference)
    except Exception:  # noqa: BLE001 - a reply that breaks the parser is a wrong reply
        return False


def extracted_answer(benchmark: str, prediction: str) -> str:
    """What the grader read as the final answer (for transcripts; "" when nothing)."""
    try:
        if benchmark in CHOICE_BENCHMARKS:
            return extract_letter(prediction or "", 4 if benchmark != "aqua" else 5) or ""
        return _math_call("extract", strip_reasoning(prediction or "")) or ""
    except Exception:  # noqa: BLE001
        return ""
