"""The debate moderator's verdict, read leniently and safely.

The moderator is asked for a JSON object `{"preference": "yes"|"no", "supported_side":
"affirmative"|"negative", "reason": ..., "answer": ...}`. Small models wrap it in prose or code
fences, use single quotes, Python literals, trailing commas, or the original MAD keys
("Whether there is a preference", "Supported Side", "debate_answer"). We strip reasoning
blocks, take the last JSON-looking object, repair the common slips and parse it with
`json.loads`; failing that, the fields are read one by one with regular expressions. Nothing is
ever `eval`-ed. A reply we cannot read is "no verdict": the debate goes on.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from eval.answers import strip_reasoning

_KEYS = {
    "preference": ("preference", "whether there is a preference", "settled", "decision"),
    "side": ("supported_side", "supported side", "side", "winner"),
    "answer": ("answer", "debate_answer", "final_answer", "final answer"),
    "reason": ("reason", "reasoning", "rationale"),
}
_YES = {"yes", "true", "1", "y"}


@dataclass(frozen=True)
class Verdict:
    """A readable moderator verdict. `settled` only with a side or an answer to settle on."""

    settled: bool
    side: str  # "affirmative", "negative" or ""
    answer: str
    reason: str = ""


def _objects(text: str) -> list[str]:
    """Balanced `{...}` spans of `text` (outermost only), in order."""
    spans, depth, start = [], 0, -1
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                spans.append(text[start:i + 1])
    return spans


def _repair(obj: str) -> str:
    """Common slips: Python literals, single quotes, trailing commas, smart quotes."""
    obj = obj.replace("\u201c", '"').replace("\u201d", '"').replace("\u2019", "'")
    obj = re.sub(r"\bTrue\b", "true", re.sub(r"\bFalse\b", "false", re.sub(r"\bNone\b", "null",
                                                                            obj)))
    if '"' not in obj:
        obj = obj.replace("'", '"')
    return re.sub(r",\s*([}\]])", r"\1", obj)


def _loads(obj: str) -> dict | None:
    for candidate in (obj, _repair(obj)):
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _pick(data: dict, field: str) -> str:
    lowered = {str(k).strip().lower(): v for k, v in data.items()}
    for key in _KEYS[field]:
        if key in lowered and lowered[key] is not None:
            value = lowered[key]
            return ("yes" if value else "no") if isinstance(value, bool) else str(value).strip()
    return ""


def _regex_fields(text: str) -> dict:
    """Field-by-field reading of a reply that is not JSON even after repair."""
    found = {}
    for field, keys in _KEYS.items():
        for key in keys:
            m = re.search(rf"[\"']?{re.escape(key)}[\"']?\s*[:=]\s*[\"']?([^\"'\n,}}]*)", text,
                          re.I)
            if m and m.group(1).strip():
                found[field] = m.group(1).strip()
                break
    return {_KEYS[f][0]: v for f, v in found.items()}


def _verdict(data: dict) -> Verdict | None:
    preference = _pick(data, "preference").lower()
    if not preference:
        return None
    side = _pick(data, "side").lower()
    side = next((s for s in ("affirmative", "negative") if s in side), "")
    answer = _pick(data, "answer")
    settled = preference in _YES and bool(side or answer)
    return Verdict(settled, side, answer, _pick(data, "reason"))


def parse_verdict(reply: str) -> Verdict | None:
    """The verdict in a moderator reply, or None when it holds none (see the module docstring)."""
    text = strip_reasoning(reply or "")
    fenced = re.findall(r"```(?:json)?\s*(.*?)```", text, re.S | re.I)
    for chunk in [*reversed(fenced), text]:
        for obj in reversed(_objects(chunk)):
            data = _loads(obj)
            if data is not None:
                verdict = _verdict(data)
                if verdict is not None:
                    return verdict
    return _verdict(_regex_fields(text))
