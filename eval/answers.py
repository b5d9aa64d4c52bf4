"""Reading a reply's final answer: reasoning blocks dropped, the reply's tail only, a
multiple-choice letter, the last stated math value, and the replies that would blow up a parser
(power towers, huge factorials, deep nesting). Pure and cheap: only regexes on a bounded tail
(math-verify's parse runs inside a grader helper, `eval.grader_pool`)."""
from __future__ import annotations

import math
import re

from eval.benchmarks import LETTERS

# Only the end of a reply is graded: a final answer is stated last, and 4,000 characters
# (about a page) hold it with room to spare while keeping every regex and parse cheap on a
# megabyte reply.
REPLY_TAIL = 4000
MAX_NESTING = 64  # brackets deeper than this are no answer (normal LaTeX stays under 10)
MAX_DIGITS = 100_000  # a power tower whose value has more digits than this is no answer
MAX_FACTORIAL = 5000  # n! beyond this (or a factorial of a factorial) is no answer

_THINK_TAG = re.compile(r"<(/?)think>", re.I)


def strip_reasoning(text: str) -> str:
    """The reply without its reasoning blocks; an unclosed `<think>` drops everything after it,
    and text before a lone `</think>` (a template that opened the block for the model) goes.
    One pass over the tags, so it stays linear on a megabyte of them."""
    text = text or ""
    tags = list(_THINK_TAG.finditer(text))
    last_close = max((i for i, t in enumerate(tags) if t.group(1)), default=-1)
    kept, pos, inside, after_lone_close = [], 0, False, None
    for i, tag in enumerate(tags):
        if not inside and not tag.group(1):  # an opening tag
            kept.append(text[pos:tag.start()])
            if i > last_close:  # never closed: the model never answered
                kept.append(" ")
                pos = len(text)
                break
            inside, pos = True, tag.end()
        elif inside and tag.group(1):  # the first closing tag ends the block
            kept.append(" ")
            inside, pos = False, tag.end()
        elif not inside:  # a lone closing tag: what came before it goes
            kept.append(text[pos:tag.start()])
            pos = tag.end()
            after_lone_close = len(kept)
    kept.append(text[pos:])
    return "".join(kept[after_lone_close or 0:])


def tail(text: str) -> str:
    """The part of a reply that is graded: its last `REPLY_TAIL` characters."""
    return text[-REPLY_TAIL:]


def _boxed(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` / `\\fbox{...}`, braces balanced, in order (one pass
    pairing the braces, so a run of unclosed boxes stays linear)."""
    closing, stack = {}, []
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            closing[stack.pop()] = m.start()
    found = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        end = closing.get(m.end() - 1)
        if end is not None:
            found.append(text[m.end():end])
    return found


def extract_letter(text: str, n_choices: int = 5) -> str | None:
    """The chosen option letter of a multiple-choice reply, or None when there is none.

    Looked for in order of how deliberate it is: the last `\\boxed{..}` holding a letter, the
    last "answer is/: X" phrase, then the last letter standing alone as `(X)`, `X)`, `X.` or
    the whole reply. Letters beyond the options (`n_choices`) never count. Only the reply's
    tail is read, with each run of spaces made one, so no pattern can backtrack for long."""
    text = tail(strip_reasoning(text))
    text = re.sub(r"\s+", lambda m: "\n" if "\n" in m.group() else " ", text)
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


# ---- math answers that would blow up, caught in the caller before any parsing ----

_POWER_CHAIN = re.compile(r"(?<![\d.])\d+(?:\s*(?:\^|\*\*)\s*[{(]?\s*\d+)+")
_FACTORIAL = re.compile(r"(?<![\d.])(\d+)\s*!(?!!*\s*$|!*\s+[A-Z])")  # not "It is 10000!"
_FACTORIAL_OF_FACTORIAL = re.compile(r"!\s*(?:\\right)?\s*[)}\]]\s*!")


def _tower_too_big(numbers: list[str]) -> bool:
    """Whether the right-associated power tower `n1^(n2^(...))` has over `MAX_DIGITS` digits
    (worked out on magnitudes; nothing big is ever computed)."""
    value = int(numbers[-1])
    for base in map(int, reversed(numbers[:-1])):
        if base <= 1:
            value = base
        elif value > 10 ** 6 or value * math.log10(base) > MAX_DIGITS:
            return True
        else:
            value = base ** value if value * math.log10(base) < 7 else 10 ** 7
    return False


def explosive(text: str) -> bool:
    """Whether an answer would take unbounded time or memory to evaluate: brackets nested over
    `MAX_NESTING` deep, a power tower of literal numbers over `MAX_DIGITS` digits (`9**9**9**9`,
    `10^{10^{10}}`), a factorial over `MAX_FACTORIAL` or of a factorial. Linear in the text."""
    depth = deepest = 0
    for ch in re.findall(r"[{}()\[\]]", text):
        depth = depth + 1 if ch in "{([" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    if deepest > MAX_NESTING:
        return True
    for m in _POWER_CHAIN.finditer(text):
        numbers = re.findall(r"\d+", m.group())
        if _tower_too_big(numbers):
            return True
    if any(len(n) > 5 or int(n) > MAX_FACTORIAL for n in _FACTORIAL.findall(text)):
        return True
    return bool(_FACTORIAL_OF_FACTORIAL.search(text))


# ---- what runs in the helper process ----

_ANSWER_PHRASE = re.compile(
    r"\b(?:final\s+)?answer\b(?:\s+(?:to|for|of)\b[^.\n:=]{0,80}?)?"
    r"[ \t*]*(?:\bis\b|:|=)[ \t*:]*", re.I)
_CONCLUSION = re.compile(r"\b(?:therefore|thus|hence|so)\b[^\n]{0,200}?=([^=\n]+)$", re.I)
_PROSE_WORD = re.compile(r"\b(?:[A-Za-z]{3,}|is|or|so|as|in|of|if|at|by|we|it|to|be|"
                         r"cm|mm|km|kg|mg|ml|ft|mi|lb|oz|hr)\b")  # words and units
_DELIMITED = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]|\$([^$\n]+?)\$|\\\((.+?)\\\)", re.S)


def _clean_value(value: str) -> str:
    """A stated answer without its math delimiters, bold marks and the prose after it: cut
    at the first English word or unit outside braces (`42 apples`, `3 km/h`, `41, not 42`) or
    at the end of the sentence; "" when it starts with a word (`the answer is clearly ...`)."""
    value = re.sub(r"\\?\$|\\[()\[\]]|\*\*", " ", value).strip(" \t*")
    depth, end = 0, len(value)
    for i, ch in enumerate(value):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(depth - 1, 0)
        elif depth == 0 and ch.isalpha() and (i == 0 or value[i - 1] != "\\"):
            word = _PROSE_WORD.match(value, i)
            if word and (i == 0 or not value[i - 1].isalpha()):
                end = i
                break
        elif depth == 0 and ch in ".;" and (i + 1 == len(value) or value[i + 1].isspace()):
            end = i
            break
    value = re.sub(r"(?<=\d) (?=\d{3}\b)", "", value[:end])  # 1 000 -> 1000
    value = re.sub(r"(?<!\\)!+$", "", value.rstrip(" \t,;:.([")).strip()  # 42! -> 42
    return value.lstrip(" \t,;:").rstrip(" \t,;:.")


def _stated_answer(text: str) -> str:
    """The value of the reply's last explicit answer statement ("the answer is X", "Final
    answer: X", "Answer = X"), else of a closing "Therefore/Thus/So ... = X" sentence; ""
    when there is neither (math-verify then reads the whole reply as before)."""
    phrases = list(_ANSWER_PHRASE.finditer(text))
    if phrases:
        rest = text[phrases[-1].end():].lstrip()
        delimited = _DELIMITED.match(rest)
        line = next(filter(None, delimited.groups())) if delimited else rest.split("\n", 1)[0]
        return _clean_value(line)
    lines = [line for line in text.strip().split("\n") if line.strip()]
    sentences = re.split(r"(?<=[.!?])(?<!\\!)\s+(?=\S)", lines[-1].strip()) if lines else [""]
    m = _CONCLUSION.search(sentences[-1].rstrip(". "))
    return _clean_value(m.group(1)) if m else ""


def read_prediction(text: str) -> list:
    """math-verify's reading of a reply: a boxed answer as math-verify finds it, else the value
    of the last stated answer when it parses, else whatever math-verify finds in the reply."""
    from math_verify import parse

    if "\\boxed{" not in text:
        value = _stated_answer(text)
        for candidate in (f"${value}$", value) if value else ():  # as LaTeX, else as plain
            parsed = parse(candidate, parsing_timeout=None)
            if any(not isinstance(p, str) for p in parsed):
                return parsed
    return parse(text, parsing_timeout=None)
