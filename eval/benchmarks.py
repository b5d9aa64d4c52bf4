"""Reasoning benchmarks in one question format.

Every loader turns its publisher's file into `Question`s: an id, the question text (choices
listed as `A) ...` lines for multiple choice), the choices, and the reference answer (a LaTeX
or plain math answer, or a choice letter). The files are read from a data folder given by the
caller, else `$MARS_BENCHMARK_DIR`, else the sibling `../shared/data/benchmarks` of this
repository (where tests and CI find the shipped files). GPQA-Diamond is gated by its authors:
it is only ever read from a path the user supplies, and its questions are marked `gated` so
nothing downstream writes their text into artifacts.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

LETTERS = "ABCDEFGHIJ"
ENV_DIR = "MARS_BENCHMARK_DIR"
ENV_GPQA = "MARS_GPQA_PATH"
SHIPPED_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "benchmarks"


class BenchmarkError(ValueError):
    """A benchmark that cannot be loaded (one-line message naming the file or field)."""


@dataclass(frozen=True)
class Question:
    """One benchmark item. `reference` is a math answer (`kind == "math"`) or a choice letter
    (`kind == "choice"`); `choices` are the option texts in letter order (empty for math)."""

    benchmark: str
    id: str
    prompt: str
    reference: str
    choices: tuple[str, ...] = ()
    gated: bool = False

    @property
    def kind(self) -> str:
        return "choice" if self.choices else "math"


def _rows(path: Path) -> list[dict]:
    """The JSON objects of a JSONL file (one-line error naming the line that is not JSON)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise BenchmarkError(f"{path}: line {n} is not JSON ({e.msg})") from None
    return rows


def _field(row: dict, key: str, path: Path, n: int):
    if key not in row or row[key] is None:
        raise BenchmarkError(f"{path}: item {n} has no {key!r} field")
    return row[key]


def with_choices(text: str, choices: list[str]) -> str:
    """The question followed by its options, one `A) option` line each."""
    lines = [f"{LETTERS[i]}) {c}" for i, c in enumerate(choices)]
    return text.strip() + "\n\n" + "\n".join(lines)


def _number(value) -> str:
    """`27.0` -> `27`, `1,000` -> `1000`: the plain form of a numeric answer (anything else,
    such as `(3, \\frac{\\pi}{2})`, is kept as written)."""
    text = str(value).strip()
    if not re.fullmatch(r"-?\d[\d,]*(\.\d+)?", text):
        return text
    f = float(text.replace(",", ""))
    return str(int(f)) if f.is_integer() else text.replace(",", "")


def _gsm8k(path: Path) -> list[Question]:
    out = []
    for n, row in enumerate(_rows(path)):
        answer = str(_field(row, "answer", path, n))
        if "####" not in answer:
            raise BenchmarkError(f"{path}: item {n} answer has no '####' final answer")
        out.append(Question("gsm8k", str(row.get("idx", n)), _field(row, "question", path, n),
                            _number(answer.rsplit("####", 1)[1])))
    return out


def _math_like(name: str):
    def load(path: Path) -> list[Question]:
        return [Question(name, str(row.get("id", row.get("unique_id", n))),
                         _field(row, "problem", path, n),
                         _number(_field(row, "answer", path, n)))
                for n, row in enumerate(_rows(path))]
    return load


def _aqua(path: Path) -> list[Question]:
    out = []
    for n, row in enumerate(_rows(path)):
        options = [re.sub(r"^\s*[A-E]\s*\)\s*", "", o) for o in _field(row, "options", path, n)]
        letter = str(_field(row, "correct", path, n)).strip().upper()
        if letter not in LETTERS[:len(options)]:
            raise BenchmarkError(f"{path}: item {n} has answer {letter!r} outside its options")
        out.append(Question("aqua", str(n), with_choices(_field(row, "question", path, n),
                                                         options), letter, tuple(options)))
    return out


def _mmlu_stem(path: Path) -> list[Question]:
    out = []
    for n, row in enumerate(_rows(path)):
        choices = [str(c) for c in _field(row, "choices", path, n)]
        index = int(_field(row, "answer", path, n))
        if not 0 <= index < len(choices):
            raise BenchmarkError(f"{path}: item {n} answer index {index} outside its choices")
        out.append(Question("mmlu_stem", f"{row.get('type', 'mmlu')}-{n}",
                            with_choices(_field(row, "question", path, n), choices),
                            LETTERS[index], tuple(choices)))
    return out


GPQA_FIELDS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
               "Incorrect Answer 3")


def _gpqa(path: Path) -> list[Question]:
    """GPQA's own CSV (or JSONL with the same columns). The four options are shuffled with a
    seed taken from the question's record id, so every run and every model sees one order."""
    if path.suffix == ".csv":
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    else:
        rows = _rows(path)
    out = []
    for n, row in enumerate(rows):
        for key in GPQA_FIELDS:
            _field(row, key, path, n)
        rid = str(row.get("Record ID") or n)
        options = [str(row[k]).strip() for k in GPQA_FIELDS[1:]]
        order = list(range(4))
        random.Random(int(hashlib.sha256(rid.encode()).hexdigest()[:12], 16)).shuffle(order)
        choices = [options[i] for i in order]
        out.append(Question("gpqa_diamond", rid, with_choices(str(row["Question"]), choices),
                            LETTERS[order.index(0)], tuple(choices), gated=True))
    return out


# name -> (file in the data folder, loader); GPQA has no file here (user path only)
BENCHMARKS = {
    "math500": ("math500.jsonl", _math_like("math500")),
    "gsm8k": ("gsm8k.jsonl", _gsm8k),
    "aqua": ("aqua.jsonl", _aqua),
    "aime24": ("aime24.jsonl", _math_like("aime24")),
    "amc23": ("amc23.jsonl", _math_like("amc23")),
    "mmlu_stem": ("mmlu_stem.jsonl", _mmlu_stem),
    "gpqa_diamond": (None, _gpqa),
}
SHIPPED = tuple(name for name, (file, _) in BENCHMARKS.items() if file)


def data_dir(explicit: str | Path | None = None) -> Path:
    """The benchmark folder: `explicit`, else $MARS_BENCHMARK_DIR, else the shipped folder."""
    chosen = explicit or os.environ.get(ENV_DIR) or SHIPPED_DIR
    path = Path(chosen).expanduser()
    if not path.is_dir():
        raise BenchmarkError(f"benchmark folder not found: {path} (give --data-dir or set "
                             f"{ENV_DIR})")
    return path


def check_names(names: list[str], gpqa_path: str | Path | None = None) -> None:
    """Refuse unknown benchmark names, and GPQA without a user-supplied path, in one line."""
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise BenchmarkError(f"unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHMARKS)}")
    if "gpqa_diamond" in names and not (gpqa_path or os.environ.get(ENV_GPQA)):
        raise BenchmarkError(f"gpqa_diamond is gated: give its file with --gpqa-path or "
                             f"{ENV_GPQA} (it is never shipped)")


def spread(items: list, limit: int | None) -> list:
    """`limit` items evenly spaced over the file (all subjects of MMLU-STEM, not only the
    first), always the same ones; all items when `limit` is None or not smaller."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise BenchmarkError(f"limit must be at least 1, got {limit}")
    return [items[(i * len(items)) // limit] for i in range(limit)]


def load(name: str, folder: str | Path | None = None, limit: int | None = None,
         gpqa_path: str | Path | None = None) -> list[Question]:
    """The questions of benchmark `name` (see `BENCHMARKS`), `limit` of them if given."""
    check_names([name], gpqa_path)
    file, loader = BENCHMARKS[name]
    if file is None:
        path = Path(gpqa_path or os.environ[ENV_GPQA]).expanduser()
    else:
        path = data_dir(folder) / file
    if not path.is_file():
        raise BenchmarkError(f"{name}: file not found: {path}")
    questions = loader(path)
    if not questions:
        raise BenchmarkError(f"{name}: {path} holds no questions")
    return spread(questions, limit)


MATH_FORMAT = "Reason step by step, then put your final answer within \\boxed{}."
CHOICE_FORMAT = ("Reason step by step, then put the letter of your final choice within \\boxed{} "
                 "(for example \\boxed{A}).")


def answer_format(q: Question) -> str:
    """How a reply must give its final answer (one line, used by every system)."""
    return CHOICE_FORMAT if q.kind == "choice" else MATH_FORMAT


def task_prompt(q: Question) -> str:
    """The single-agent prompt: the question, then the answer format."""
    return f"{q.prompt}\n\n{answer_format(q)}"
