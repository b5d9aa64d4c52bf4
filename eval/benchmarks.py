"""Reasoning benchmarks in one question format.

Every loader turns its publisher's rows into `Question`s: an id, the question text (choices
listed as `A) ...` lines for multiple choice), the choices, and the reference answer (a LaTeX
or plain math answer, or a choice letter). One function per benchmark maps a row to a
`Question`, whichever source the rows come from:

- files (the default, offline): a data folder given by the caller, else `$MARS_BENCHMARK_DIR`,
  else the sibling `../shared/data/benchmarks` of this repository (where tests and CI find the
  shipped files);
- the publishers (`hf://`): each benchmark's dataset on the Hugging Face hub (`PUBLISHERS`:
  id, config, split), read with `datasets.load_dataset`; `hf://MIRROR` reads the same
  datasets from a local copy of their repositories (`MIRROR/<owner>/<name>`). Offline mode
  (`HF_HUB_OFFLINE`, `HF_DATASETS_OFFLINE`) refuses the hub in one line, before any download.

GPQA-Diamond is gated by its authors: it is only ever read from a path the user supplies, or
from the hub with the user's own token when they ask for it (`gpqa_path="hf://"`), and its
questions are marked `gated` so nothing downstream writes their text into artifacts.
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

from mars_core.run import offline

LETTERS = "ABCDEFGHIJ"
ENV_DIR = "MARS_BENCHMARK_DIR"
ENV_GPQA = "MARS_GPQA_PATH"
SHIPPED_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "benchmarks"
HUB = "hf://"  # a source that is the publishers' datasets on the Hugging Face hub
# the variables of `mars_core.run.offline.HUB_OFFLINE` that `datasets` reads (not TRANSFORMERS_OFFLINE)
OFFLINE_ENV = tuple(k for k in offline.HUB_OFFLINE if k.startswith("HF_"))


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


def _file_rows(path: Path) -> list[dict]:
    """The rows of a CSV file (GPQA's own format) or of a JSONL file."""
    if path.suffix == ".csv":
        with open(path, encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f))
    return _rows(path)


def _field(row: dict, key: str, where, n: int):
    if key not in row or row[key] is None:
        raise BenchmarkError(f"{where}: item {n} has no {key!r} field")
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


# Row -> Question, one function per benchmark, shared by the file and the hub sources. Each
# takes the row, its position and where it came from (for one-line errors).

def _gsm8k(row: dict, n: int, where) -> Question:
    answer = str(_field(row, "answer", where, n))
    if "####" not in answer:
        raise BenchmarkError(f"{where}: item {n} answer has no '####' final answer")
    return Question("gsm8k", str(row.get("idx", n)), _field(row, "question", where, n),
                    _number(answer.rsplit("####", 1)[1]))


def _math_like(name: str):
    def question(row: dict, n: int, where) -> Question:
        return Question(name, str(row.get("id", row.get("unique_id", n))),
                        _field(row, "problem", where, n), _number(_field(row, "answer", where, n)))
    return question


def _aqua(row: dict, n: int, where) -> Question:
    options = [re.sub(r"^\s*[A-E]\s*\)\s*", "", o) for o in _field(row, "options", where, n)]
    letter = str(_field(row, "correct", where, n)).strip().upper()
    if letter not in LETTERS[:len(options)]:
        raise BenchmarkError(f"{where}: item {n} has answer {letter!r} outside its options")
    return Question("aqua", str(n), with_choices(_field(row, "question", where, n), options),
                    letter, tuple(options))


def _mmlu_stem(row: dict, n: int, where) -> Question:
    choices = [str(c) for c in _field(row, "choices", where, n)]
    index = int(_field(row, "answer", where, n))
    if not 0 <= index < len(choices):
        raise BenchmarkError(f"{where}: item {n} answer index {index} outside its choices")
    subject = row.get("type") or row.get("subject") or "mmlu"  # file: `type`; hub: `subject`
    return Question("mmlu_stem", f"{subject}-{n}",
                    with_choices(_field(row, "question", where, n), choices),
                    LETTERS[index], tuple(choices))


GPQA_FIELDS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
               "Incorrect Answer 3")


def _gpqa(row: dict, n: int, where) -> Question:
    """GPQA's own columns (its CSV, JSONL with the same columns, or the hub dataset). The four
    options are shuffled with a seed taken from the question's record id, so every run and
    every model sees one order."""
    for key in GPQA_FIELDS:
        _field(row, key, where, n)
    rid = str(row.get("Record ID") or n)
    options = [str(row[k]).strip() for k in GPQA_FIELDS[1:]]
    order = list(range(4))
    random.Random(int(hashlib.sha256(rid.encode()).hexdigest()[:12], 16)).shuffle(order)
    choices = [options[i] for i in order]
    return Question("gpqa_diamond", rid, with_choices(str(row["Question"]), choices),
                    LETTERS[order.index(0)], tuple(choices), gated=True)


# name -> (file in the data folder, row -> Question); GPQA has no file here (user path only)
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


@dataclass(frozen=True)
class Publisher:
    """Where a benchmark comes from on the Hugging Face hub: the dataset id, its configs (read
    in this order and concatenated), the split, and for a subset the column and the text that
    a kept row's value contains."""

    id: str
    split: str
    configs: tuple[str | None, ...] = (None,)
    keep: tuple[str, str] | None = None
    gated: bool = False


# The 18 MMLU STEM subjects of the shipped file, in its order (ids are `<subject>-<position>`).
MMLU_STEM_SUBJECTS = (
    "college_biology", "astronomy", "electrical_engineering", "high_school_biology",
    "machine_learning", "abstract_algebra", "high_school_mathematics",
    "high_school_computer_science", "college_chemistry", "high_school_chemistry",
    "computer_security", "conceptual_physics", "high_school_physics", "college_physics",
    "high_school_statistics", "elementary_mathematics", "college_mathematics",
    "college_computer_science")

# The datasets the shipped files hold (same rows and answers; the files add or rename a
# column: gsm8k `idx`, MMLU `type` for `subject`, AIME/AMC a `question` copy of `problem`).
PUBLISHERS = {
    "math500": Publisher("HuggingFaceH4/MATH-500", "test"),
    "gsm8k": Publisher("openai/gsm8k", "test", ("main",)),
    "aqua": Publisher("deepmind/aqua_rat", "test", ("raw",)),
    "aime24": Publisher("HuggingFaceH4/aime_2024", "train"),
    "amc23": Publisher("AI-MO/aimo-validation-amc", "train", keep=("url", "2023_AMC")),
    "mmlu_stem": Publisher("cais/mmlu", "test", MMLU_STEM_SUBJECTS),
    "gpqa_diamond": Publisher("Idavidrein/gpqa", "train", ("gpqa_diamond",), gated=True),
}


def is_hub(source) -> bool:
    """Whether a data folder or GPQA path names the hub (`hf://`, or `hf://MIRROR`)."""
    return isinstance(source, str) and source.startswith(HUB)


def _mirror(source: str) -> Path | None:
    """`hf://` -> None (the hub itself); `hf://MIRROR` -> the local copy's folder."""
    rest = source[len(HUB):]
    if not rest:
        return None
    path = Path(rest).expanduser()
    if not path.is_dir():
        raise BenchmarkError(f"hub mirror folder not found: {path} (from {source}; plain "
                             f"{HUB} reads the Hugging Face hub)")
    return path


def _chosen(explicit):
    return explicit or os.environ.get(ENV_DIR) or SHIPPED_DIR


def data_dir(explicit: str | Path | None = None) -> Path | str:
    """The benchmark source: `explicit`, else $MARS_BENCHMARK_DIR, else the shipped folder.
    A folder comes back as a Path; `hf://` (once the hub is known online and reachable) or
    `hf://MIRROR` (an existing folder) comes back as given, so a command refuses it up front."""
    chosen = _chosen(explicit)
    if is_hub(chosen):
        _hub_check(chosen, PUBLISHERS[SHIPPED[0]].id, "the publishers' datasets")
        return chosen
    path = Path(chosen).expanduser()
    if not path.is_dir():
        raise BenchmarkError(f"benchmark folder not found: {path} (give --data-dir or set "
                             f"{ENV_DIR}; {HUB} reads the publishers' datasets from the hub)")
    return path


def check_names(names: list[str], gpqa_path: str | Path | None = None) -> None:
    """Refuse unknown benchmark names, and GPQA without a user-supplied path, in one line."""
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise BenchmarkError(f"unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHMARKS)}")
    if "gpqa_diamond" in names and not (gpqa_path or os.environ.get(ENV_GPQA)):
        raise BenchmarkError(f"gpqa_diamond is gated: give its file with --gpqa-path or "
                             f"{ENV_GPQA} (it is never shipped), or --gpqa-path {HUB} to read "
                             f"it from the hub with your own token")


def _offline() -> str | None:
    """The variables that put the hub offline (`HF_HUB_OFFLINE=1`, ...), if any do (`mars`
    sets both unless they are set already)."""
    on = [f"{k}={os.environ[k]}" for k in OFFLINE_ENV
          if os.environ.get(k, "").strip().upper() in {"1", "ON", "YES", "TRUE"}]
    if not on:
        return None
    return ", ".join(on) + f"; set {'them' if len(on) > 1 else 'it'} to 0 to download"


def _unreachable(repo_id: str) -> str | None:
    """Why the hub cannot be reached (one request, 10 s at most, no retries), or None when it
    answers: then `load_dataset` (which retries a dead connection for half a minute) runs."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import HfHubHTTPError

    try:
        HfApi().dataset_info(repo_id, timeout=10)
    except HfHubHTTPError:
        return None  # it answered (not found, gated, ...): load_dataset says what in one line
    except Exception as e:  # connection refused, DNS, timeout, proxy
        return (f"{type(e).__name__}: {e}".strip().splitlines() or ["?"])[0][:200]
    return None


def _hub_check(source: str, repo_id: str, what: str, local: str = "--data-dir DIR"):
    """The folder of `hf://MIRROR`, or None for the hub itself once offline mode is off
    (checked first: no request at all) and `repo_id` answers; else a one-line BenchmarkError
    naming the local alternative."""
    mirror = _mirror(source)
    if mirror is None:
        off = _offline()
        if off:
            raise BenchmarkError(f"the Hugging Face hub is offline here ({off}), so {what} "
                                 f"cannot be downloaded; read local files with {local} instead")
        why = _unreachable(repo_id)
        if why:
            raise BenchmarkError(f"the Hugging Face hub is unreachable ({why}), so {what} "
                                 f"cannot be downloaded; read local files with {local} instead")
    return mirror


def hub_rows(name: str, source: str = HUB) -> list[dict]:
    """The rows of benchmark `name` from its publisher's dataset (`PUBLISHERS`), through
    `datasets.load_dataset(id, config, split=...)`; `source` is `hf://` (the hub) or
    `hf://MIRROR` (a local copy of the repositories, `MIRROR/<owner>/<name>`)."""
    pub = PUBLISHERS[name]
    local = "--gpqa-path FILE" if name == "gpqa_diamond" else "--data-dir DIR"
    try:
        mirror = _hub_check(source, pub.id, pub.id, local)
    except BenchmarkError as e:
        raise BenchmarkError(f"{name}: {e}") from None
    if mirror is None:
        path = pub.id
    else:
        path = str(mirror / pub.id)
        if not Path(path).is_dir():
            raise BenchmarkError(f"{name}: no copy of {pub.id} in the hub mirror {mirror}")
    try:
        import datasets
    except ImportError:
        raise BenchmarkError(f"{name}: reading {HUB} needs the datasets package: pip install "
                             f"-e '.[eval]'") from None
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bar()
    rows = []
    try:
        for config in pub.configs:
            try:
                rows += datasets.load_dataset(path, config, split=pub.split).to_list()
            except Exception as e:  # network, auth, missing config or split: one line
                reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
                hint = (" (gated: accept its terms on huggingface.co and log in with `hf auth "
                        "login` or HF_TOKEN)") if pub.gated else ""
                raise BenchmarkError(f"{name}: cannot load {pub.id} "
                                     f"[{config or 'default'}, {pub.split}] from "
                                     f"{mirror or 'the Hugging Face hub'}: {reason}{hint}; "
                                     f"read local files with {local} instead") from None
    finally:
        if bars:
            datasets.enable_progress_bar()
    if pub.keep:
        column, text = pub.keep
        rows = [r for r in rows if text in str(r.get(column) or "")]
    return rows


def source_of(name: str, folder: str | Path | None = None,
              gpqa_path: str | Path | None = None) -> str:
    """Where benchmark `name`'s questions are read: its file, or the publisher's dataset."""
    file, _ = BENCHMARKS[name]
    source = (gpqa_path or os.environ[ENV_GPQA]) if file is None else _chosen(folder)
    if is_hub(source):
        pub = PUBLISHERS[name]
        return f"{pub.id} ({pub.split} split)"
    return str(Path(source).expanduser() if file is None else data_dir(source) / file)


def load(name: str, folder: str | Path | None = None, limit: int | None = None,
         gpqa_path: str | Path | None = None) -> list[Question]:
    """The questions of benchmark `name` (see `BENCHMARKS`), `limit` of them if given. `folder`
    (or `gpqa_path` for GPQA) may be `hf://` to read the publisher's dataset from the hub."""
    check_names([name], gpqa_path)
    file, question = BENCHMARKS[name]
    source = (gpqa_path or os.environ[ENV_GPQA]) if file is None else _chosen(folder)
    where = source_of(name, folder, gpqa_path)
    if is_hub(source):
        rows = hub_rows(name, source)
    else:
        where = Path(where)
        if not where.is_file():
            raise BenchmarkError(f"{name}: file not found: {where}")
        rows = _file_rows(where)
    questions = [question(row, n, where) for n, row in enumerate(rows)]
    if not questions:
        raise BenchmarkError(f"{name}: {where} holds no questions")
    return spread(questions, limit)


def spread(items: list, limit: int | None) -> list:
    """`limit` items evenly spaced over the file (all subjects of MMLU-STEM, not only the
    first), always the same ones; all items when `limit` is None or not smaller."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise BenchmarkError(f"limit must be at least 1, got {limit}")
    return [items[(i * len(items)) // limit] for i in range(limit)]


MATH_FORMAT = "Reason step by step, then put your final answer within \\boxed{}."
CHOICE_FORMAT = ("Reason step by step, then put the letter of your final choice within \\boxed{} "
                 "(for example \\boxed{A}).")


def answer_format(q: Question) -> str:
    """How a reply must give its final answer (one line, used by every system)."""
    return CHOICE_FORMAT if q.kind == "choice" else MATH_FORMAT


def task_prompt(q: Question) -> str:
    """The single-agent prompt: the question, then the answer format."""
    return f"{q.prompt}\n\n{answer_format(q)}"
