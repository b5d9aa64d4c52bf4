"""Graders on real answers from the shipped benchmark files, in the forms models write them,
and on wrong or unreadable replies (which are wrong, never skipped)."""
from __future__ import annotations

import threading

import pytest

from eval.benchmarks import load
from eval.graders import extract_letter, extracted_answer, is_correct, strip_reasoning


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


@pytest.mark.parametrize("bench,ref,replies", MATH_RIGHT)
def test_math_answers_in_every_written_form_are_right(bench, ref, replies):
    ref = _reference(bench, ref)
    for reply in replies:
        assert is_correct(bench, reply, ref), reply


@pytest.mark.parametrize("bench,ref,replies", MATH_WRONG)
def test_wrong_or_unreadable_math_answers_are_wrong(bench, ref, replies):
    ref = _reference(bench, ref)
    for reply in replies:
        assert not is_correct(bench, reply, ref), reply


def test_every_math500_reference_grades_itself_boxed():
    for q in load("math500"):
        assert is_correct("math500", f"Final answer: \\boxed{{{q.reference}}}", q.reference), \
            q.reference


LETTER_FORMS = ["C", "(C)", "C)", "\\boxed{C}", "The answer is C", "the answer is (C).",
                "Answer: C", "**Answer:** C", "\\boxed{\\text{(C)}}", "So the final answer is: "
                "\\boxed{C}.", "I first thought A) was right, but the correct option is (C)",
                "<think>It is A or B</think>\nThe answer is C"]


@pytest.mark.parametrize("bench", ["aqua", "mmlu_stem"])
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
