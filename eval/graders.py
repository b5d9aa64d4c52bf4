"""Honest grading: a reply is right only when its final answer can be read and matches.

Math answers go through `math-verify` (LaTeX and plain expressions: fractions, radicals,
tuples, units, `27.0` vs `27`); multiple-choice replies through a letter extractor that reads
`\\boxed{C}`, `The answer is (C)`, `C)`, `(C)` or a bare `C`. Reasoning blocks
(`<think>...</think>`) are dropped first; an unclosed one means the model never answered. A
reply with no readable answer is wrong, never skipped.
"""
from __future__ import annotations

import re
import threading

from eval.benchmarks import BENCHMARKS, LETTERS

CHOICE_BENCHMARKS = frozenset({"aqua", "mmlu_stem", "gpqa_diamond"})
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_OPEN_THINK = re.compile(r"<think>.*", re.S | re.I)


def strip_reasoning(text: str) -> str:
    """The reply without its reasoning blocks; an unclosed `<think>` drops everything after it,
    and text before a lone `</think>` (a template that opened the block for the model) goes."""
    text = _THINK.sub(" ", text or "")
    text = _OPEN_THINK.sub(" ", text)
    if "</think>" in text.lower():
        text = re.split(r"</think>", text, flags=re.I)[-1]
    return text


def _boxed(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` / `\\fbox{...}`, braces balanced, in order."""
    found = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found.append(text[m.end():i - 1])
    return found


def extract_letter(text: str, n_choices: int = 5) -> str | None:
    """The chosen option letter of a multiple-choice reply, or None when there is none.

    Looked for in order of how deliberate it is: the last `\\boxed{..}` holding a letter, the
    last "answer is/: X" phrase, then the last letter standing alone as `(X)`, `X)`, `X.` or
    the whole reply. Letters beyond the options (`n_choices`) never count."""
    text = strip_reasoning(text)
    allowed = LETTERS[:n_choices]
    letter = rf"[{allowed}]"
    for content in reversed(_boxed(text)):
        m = re.fullmatch(rf"\s*(?:\\text\{{)?\s*\(?({letter})\)?\s*\}}?\s*(?:[:.)].*)?", content,
                         re.S)
        if m:
            return m.group(1)
    patterns = [
        rf"(?i:answer)\s*(?i:is|:)?\s*(?i:option\s*)?[:\-]?\s*\**\s*\(?({letter})\b(?![^\s.,;:)*])",
        rf"(?:^|[\s(\[*])\(({letter})\)",
        rf"(?:^|\n)\s*\**({letter})\s*[).:]",
        rf"(?:^|\s)({letter})\)",
    ]
    for pattern in patterns:
        hits = re.findall(pattern, text)
        if hits:
            return hits[-1]
    bare = re.fullmatch(rf"\s*\**\s*({letter})\s*\**\s*\.?\s*", text)
    return bare.group(1) if bare else None


def _math_verify_kwargs() -> tuple[dict, dict]:
    """math-verify times out with signal.alarm, which only works in the main thread; Prefect
    runs tasks in worker threads, where its timeouts are switched off."""
    if threading.current_thread() is threading.main_thread():
        return {}, {}
    return {"parsing_timeout": None}, {"timeout_seconds": None}


def math_equal(prediction: str, reference: str) -> bool:
    """Whether the reply's final answer equals the reference (math-verify; False when the
    reply holds no answer it can read)."""
    from math_verify import parse, verify

    parse_kw, verify_kw = _math_verify_kwargs()
    text = strip_reasoning(prediction)
    if not text.strip():
        return False
    gold = parse(f"${reference}$", **parse_kw)
    if not gold:
        gold = parse(reference, **parse_kw)
    pred = parse(text, **parse_kw)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, **verify_kw))


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
        from math_verify import parse

        parsed = parse(strip_reasoning(prediction or ""), **_math_verify_kwargs()[0])
        return str(parsed[-1]) if parsed else ""
    except Exception:  # noqa: BLE001
        return ""
