"""Graders on real answers from the shipped benchmark files, in the forms models write them,
and on wrong or unreadable replies (which are wrong, never skipped)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from eval import grader_pool
from eval.answers import extract_letter, strip_reasoning
from eval.benchmarks import load
from eval.graders import extracted_answer, is_correct
from tests.benchmark_files import on_files


def _reference(bench: str, wanted: str) -> str:
    """The reference of a shipped question, found by its exact reference text."""
    refs = [q.reference for q in load(bench)]
    assert wanted in refs, f"{wanted!r} is not a {bench} reference any more"
    return wanted


MATH_RIGHT = [
    ("math500", "\\frac{14}{3}", ["\\boxed{\\dfrac{14}{3}}", "so $x = \\boxed{14/3}$",
                                  "The answer is $\\frac{14}{3}$."]),
    ("math500", "3\\sqrt{13}", ["\\boxed{3\\sqrt{13}}", "$\\boxed{3 \\sqrt{13}}$"]),
    ("math500", "\\left( 3, \\frac{\\pi}{2} \\right)", ["\\boxed{(3, \\frac{\\pi}{2})}",
                                                         "\\boxed{\\left(3,\\pi/2\\right)}"]),
    ("math500", "90^\\circ", ["\\boxed{90^\\circ}", "\\boxed{90}"]),
    ("math500", "\\text{Evelyn}", ["\\boxed{\\text{Evelyn}}", "\\boxed{Evelyn}"]),
    ("math500", "6 - 5i", ["\\boxed{6-5i}"]),
    ("amc23", "27", ["\\boxed{27}", "\\boxed{27.0}", "They meet 27 miles from A: \\boxed{27}"]),
    ("gsm8k", "18", ["She makes $18 a day.\n\\boxed{18}", "\\boxed{\\$18}", "#### 18"]),
    ("aime24", "204", ["The walk takes \\boxed{204} minutes.", "\\boxed{204.0}"]),
]
MATH_WRONG = [
    ("math500", "\\frac{14}{3}", ["\\boxed{\\frac{3}{14}}", "\\boxed{4.6}", "", "no idea",
                                  "<think>\\boxed{14/3}"]),
    ("math500", "3\\sqrt{13}", ["\\boxed{\\sqrt{13}}", "\\boxed{39}"]),
    ("math500", "\\left( 3, \\frac{\\pi}{2} \\right)", ["\\boxed{(\\frac{\\pi}{2}, 3)}",
                                                         "\\boxed{3}"]),
    ("amc23", "27", ["\\boxed{18}", "\\boxed{27.5}"]),
    ("gsm8k", "18", ["\\boxed{16}", "\\boxed{180}"]),
]


@pytest.mark.parametrize("bench,ref,replies", on_files(MATH_RIGHT))
def test_math_answers_in_every_written_form_are_right(bench, ref, replies):
    ref = _reference(bench, ref)
    for reply in replies:
        assert is_correct(bench, reply, ref), reply


@pytest.mark.parametrize("bench,ref,replies", on_files(MATH_WRONG))
def test_wrong_or_unreadable_math_answers_are_wrong(bench, ref, replies):
    ref = _reference(bench, ref)
    for reply in replies:
        assert not is_correct(bench, reply, ref), reply


@pytest.mark.benchmarks("math500")
def test_every_math500_reference_grades_itself_boxed():
    for q in load("math500"):
        assert is_correct("math500", f"Final answer: \\boxed{{{q.reference}}}", q.reference), \
            q.reference


LETTER_FORMS = ["C", "(C)", "C)", "\\boxed{C}", "The answer is C", "the answer is (C).",
                "Answer: C", "**Answer:** C", "\\boxed{\\text{(C)}}", "So the final answer is: "
                "\\boxed{C}.", "I first thought A) was right, but the correct option is (C)",
                "<think>It is A or B</think>\nThe answer is C"]


@pytest.mark.parametrize("bench", on_files(["aqua", "mmlu_stem"]))
def test_letters_in_every_form(bench):
    q = next(q for q in load(bench) if q.reference == "C")
    for reply in LETTER_FORMS:
        assert is_correct(bench, reply, q.reference), reply
        assert not is_correct(bench, reply.replace("C", "D").replace("(D)", "(D)"), "C")


@pytest.mark.parametrize("reply", ["", "I cannot tell", "the answer is a number", "E",
                                   "<think>the answer is C", "\\boxed{42}", "c", None])
def test_unreadable_choice_replies_are_wrong(reply):
    assert not is_correct("mmlu_stem", reply, "C")  # E is not one of MMLU's four options


def test_extracted_answer_is_what_the_grader_read():
    assert extracted_answer("aqua", "so \\boxed{E}") == "E"
    assert extracted_answer("mmlu_stem", "maybe") == ""
    assert extracted_answer("gsm8k", "\\boxed{18}") == "18"
    assert extract_letter("The answer is (B)", 4) == "B"


def test_reasoning_blocks_are_dropped():
    assert strip_reasoning("<think>\\boxed{1}</think> \\boxed{2}").strip() == "\\boxed{2}"
    assert strip_reasoning("plan\n</think>\n\\boxed{2}").strip() == "\\boxed{2}"
    assert strip_reasoning("<think>never closed \\boxed{1}").strip() == ""


def test_grading_works_in_worker_threads():
    """Prefect runs tasks in threads, where math-verify's signal-based timeout cannot run."""
    out = {}
    t = threading.Thread(target=lambda: out.update(ok=is_correct("gsm8k", "\\boxed{18}", "18")))
    t.start()
    t.join()
    assert out["ok"] is True


def test_garbage_never_raises():
    for reply in ["\\boxed{", "}}}{{{", "\\frac{1}{0}", "\\boxed{\\sqrt{-}}", "$$$$", "x" * 5000,
                  "\\boxed{" * 50]:
        assert is_correct("math500", reply, "\\frac{14}{3}") in (True, False)
    with pytest.raises(ValueError, match="unknown benchmark"):
        is_correct("nope", "1", "1")


# ---- bounded time in any thread (math-verify's own timeouts are off outside the main one) ----

TIMEOUT_S = 2.0  # MARS_GRADER_TIMEOUT_S in these tests
BOUND_S = 15.0  # what one call may take: the timeout, plus a helper's restart on a busy machine
MB = 1 << 20


@pytest.fixture
def short_timeout(monkeypatch):
    monkeypatch.setenv("MARS_GRADER_TIMEOUT_S", str(TIMEOUT_S))


def _in_thread(fn, *args):
    """`fn(*args)` in a worker thread, as Prefect runs it: (its value, seconds). Fails, rather
    than blocks, when it has not returned within BOUND_S (a daemon thread is left behind)."""
    out = {}

    def run():
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - reported below
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(BOUND_S)
    assert not thread.is_alive(), f"grading did not return within {BOUND_S} s"
    assert "error" not in out, out.get("error")
    return out["value"], time.monotonic() - start


PATHOLOGICAL = {
    "power tower": "\\boxed{10^{10^{10^{10}}}}",
    "power tower in prose": "The answer is 9**9**9**9",
    "factorial tower": "\\boxed{((100!)!)!}",
    "huge factorial": "\\boxed{123456789!}",
    "power of a power": "The answer is (10^10)^(10^10)",
    "30 nested fractions": "\\boxed{" + "\\frac{1}{" * 30 + "2" + "}" * 30 + "}",
    "50,000 nested braces": "\\boxed{" + "{" * 50_000 + "42" + "}" * 50_000 + "}",
    "50,000 nested roots": "\\boxed{" + "\\sqrt{" * 50_000 + "2" + "}" * 50_000 + "}",
    "50,000 nested parentheses": "$" + "(" * 50_000 + "42" + ")" * 50_000 + "$",
    "megabyte boxed sum": "\\boxed{" + "1+" * (MB // 2) + "1}",
    "megabyte of think tags": "<think>" * (MB // 7),
    "megabyte of unclosed boxes": "\\boxed{" * (MB // 7) + "42",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", PATHOLOGICAL)
def test_pathological_answers_are_wrong_within_the_bound_in_a_worker_thread(short_timeout,
                                                                              name):
    verdict, took = _in_thread(is_correct, "math500", PATHOLOGICAL[name], "42")
    assert verdict is False and took < BOUND_S, (name, took)
    answer, _ = _in_thread(extracted_answer, "math500", PATHOLOGICAL[name])
    assert isinstance(answer, str)


@pytest.mark.timeout(120)
def test_megabyte_replies_are_read_by_their_tail(short_timeout):
    """Only the last REPLY_TAIL characters can hold the final answer: a megabyte of reasoning
    before it costs nothing, and an answer followed by a megabyte of anything is not read."""
    rambling = "Let me check this once more: 6 * 7 = 42. " * (MB // 41)
    assert _in_thread(is_correct, "gsm8k", rambling + "\\boxed{42}", "42")[0] is True
    assert _in_thread(is_correct, "gsm8k", rambling + "The answer is 41.", "42")[0] is False
    assert _in_thread(is_correct, "gsm8k", "\\boxed{42} " + "x^{2} " * (MB // 6), "42")[0] \
        is False
    assert _in_thread(extracted_answer, "gsm8k", rambling + "\\boxed{42}")[0] == "42"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("reply,verdict", [
    ("The answer is" + " " * MB + "x", False),
    ("answer" + "\n" * MB + "x", False),
    ("\n" * MB + "C)", True),
    ("\\boxed{" * (MB // 7) + "C", False),
    ("(" * 50_000 + "C" + ")" * 50_000, False),  # the letter is outside the graded tail
    ("(" * 50_000 + " The answer is (C)", True),
    ("*" * MB + "The answer is (C)", True),
])
def test_letters_are_read_in_bounded_time_on_megabyte_replies(reply, verdict):
    value, took = _in_thread(is_correct, "mmlu_stem", reply, "C")
    assert value is verdict and took < BOUND_S


@pytest.mark.timeout(300)
def test_many_threads_grade_at_once_normal_and_pathological(short_timeout):
    jobs = [("gsm8k", "\\boxed{18}", "18", True), ("math500", "The answer is $3\\sqrt{13}$.",
                                                    "3\\sqrt{13}", True),
            ("aqua", "The answer is (C)", "C", True), ("amc23", "\\boxed{18}", "27", False)]
    jobs += [("math500", reply, "42", False) for reply in PATHOLOGICAL.values()]

    def grade(job):
        start = time.monotonic()
        return is_correct(*job[:3]), time.monotonic() - start

    with ThreadPoolExecutor(4) as ex:
        futures = [ex.submit(grade, job) for job in jobs * 2]
        results = [f.result(timeout=BOUND_S * len(jobs)) for f in futures]
    assert [v for v, _ in results] == [job[3] for job in jobs * 2]
    # a call may wait its turn for a busy helper: the timeout once per call queued ahead of it
    assert max(s for _, s in results) < BOUND_S + TIMEOUT_S * len(jobs)


@pytest.mark.timeout(120)
def test_a_wedged_helper_is_killed_and_replaced(short_timeout):
    """A helper that stops answering (stuck in C code, or stopped here with SIGSTOP) costs one
    wrong answer after the timeout, never a hang; a fresh helper grades the next one."""
    assert is_correct("gsm8k", "\\boxed{18}", "18")
    wedged = [w.proc for w in grader_pool._pool().workers if w.proc is not None]
    before = grader_pool.grader_stats()["killed"]
    try:
        for proc in wedged:
            os.kill(proc.pid, signal.SIGSTOP)
        verdict, took = _in_thread(is_correct, "gsm8k", "\\boxed{18}", "18")
        assert verdict is False and TIMEOUT_S <= took < BOUND_S
        assert grader_pool.grader_stats()["killed"] == before + 1
    finally:
        for proc in wedged:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
    assert sum(proc.poll() is not None for proc in wedged) == 1  # killed and reaped
    assert _in_thread(is_correct, "gsm8k", "\\boxed{18}", "18")[0] is True


def _gone(pid: int) -> bool:
    """Whether process `pid` has exited (a zombie no one reaps counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except FileNotFoundError:
        return True


@pytest.mark.timeout(120)
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("parent_ends", ["exits", "is killed", "is killed mid-answer"])
def test_helpers_do_not_outlive_their_parent(tmp_path, parent_ends):
    script = f"""
import os, signal, sys, threading, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from eval import grader_pool, graders
assert graders.is_correct("gsm8k", "\\\\boxed{{18}}", "18")
if {parent_ends!r} == "is killed mid-answer":
    slow = "\\\\boxed{{" + "\\\\frac{{1}}{{" * 30 + "2" + "}}" * 31
    threading.Thread(target=graders.is_correct, args=("math500", slow, "1"), daemon=True).start()
    time.sleep(1)
print(*[w.proc.pid for w in grader_pool._pool().workers if w.proc], flush=True)
if {parent_ends!r} != "exits":
    os.kill(os.getpid(), signal.SIGKILL)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=90)
    pids = [int(p) for p in done.stdout.split()]
    assert pids, done.stderr[-2000:]
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(_gone(p) for p in pids), [p for p in pids if not _gone(p)]


# ---- answers stated in prose, on every math benchmark ----

PROSE = [  # (benchmark, reference, the answer as a model writes it, a wrong answer)
    ("math500", "3\\sqrt{13}", "3\\sqrt{13}", "\\sqrt{13}"),
    ("math500", "\\frac{14}{3}", "\\frac{14}{3}", "\\frac{3}{14}"),
    ("math500", "\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\frac{\\pi}{2})",
     "(\\frac{\\pi}{2}, 3)"),
    ("math500", "6 - 5i", "6 - 5i", "6 + 5i"),
    ("gsm8k", "18", "18", "16"),
    ("aime24", "204", "204", "240"),
    ("amc23", "27", "27", "18"),
]
PROSE_FORMS = ["The answer is {}.", "So the final answer is {}", "Answer: {}",
               "Therefore, x = {}.", "**Final Answer:** {}", "The answer is ${}$.",
               "We check the cases one by one.\n\nHence, the answer is: **{}**",
               "<think>maybe {wrong}</think>\nThe answer to the question is {}."]


@pytest.mark.parametrize("bench,ref,written,wrong", on_files(PROSE))
def test_answers_stated_in_prose_are_graded_like_boxed_ones(bench, ref, written, wrong):
    ref = _reference(bench, ref)
    assert is_correct(bench, f"\\boxed{{{written}}}", ref)
    for form in PROSE_FORMS:
        assert is_correct(bench, form.format(written, wrong=wrong), ref), form
        assert not is_correct(bench, form.format(wrong, wrong=written), ref), form


@pytest.mark.parametrize("bench,ref,written,wrong", on_files(PROSE))
def test_other_numbers_in_prose_do_not_count(bench, ref, written, wrong):
    ref = _reference(bench, ref)
    for reply in [f"I tried {written} but the answer is {wrong}",
                  f"The answer is {wrong}, not {written}.",
                  f"The answer is {wrong}.\nLet me double check with {written}.",
                  f"We get x = {written}. Therefore, y = {wrong}.",
                  f"Answer: {wrong} (not {written})"]:
        assert not is_correct(bench, reply, ref), reply


def test_extracted_answer_is_the_stated_value():
    assert extracted_answer("math500", "The answer is 3\\sqrt{13}.") == "3\\sqrt{13}"
    assert extracted_answer("gsm8k", "I tried 42 but the answer is 41 apples.") == "41"
    assert extracted_answer("gsm8k", "Therefore, x = 5.") == "5"
