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
"""
from __future__ import annotations

import atexit
import collections
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from eval.benchmarks import BENCHMARKS, LETTERS

CHOICE_BENCHMARKS = frozenset({"aqua", "mmlu_stem", "gpqa_diamond"})
ENV_TIMEOUT = "MARS_GRADER_TIMEOUT_S"
ENV_WORKERS = "MARS_GRADER_WORKERS"
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_WORKERS = 2
# Only the end of a reply is graded: a final answer is stated last, and 4,000 characters
# (about a page) hold it with room to spare while keeping every regex and parse cheap on a
# megabyte reply.
REPLY_TAIL = 4000
MAX_NESTING = 64  # brackets deeper than this are no answer (normal LaTeX stays under 10)
MAX_DIGITS = 100_000  # a power tower whose value has more digits than this is no answer
MAX_FACTORIAL = 5000  # n! beyond this (or a factorial of a factorial) is no answer
STARTUP_TIMEOUT_S = 120.0  # a helper process that has not imported math-verify by then failed
WORKER_MEMORY_BYTES = 4 << 30  # a helper's address space; past it an answer fails, not the host

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


def _tail(text: str) -> str:
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
    text = _tail(strip_reasoning(text))
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


def _explosive(text: str) -> bool:
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


def _read_prediction(text: str) -> list:
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


def _grade_here(text: str, reference: str) -> bool:
    """Whether `text` (a stripped, bounded reply) holds `reference` (math-verify, unbounded:
    only run inside a helper process under its timer)."""
    from math_verify import parse, verify

    gold = parse(f"${reference}$", parsing_timeout=None)
    if not gold:
        gold = parse(reference, parsing_timeout=None)
    pred = _read_prediction(text)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=None))


def _extract_here(text: str) -> str:
    """What `_grade_here` reads as the final answer of `text` ("" when nothing)."""
    parsed = _read_prediction(text)
    return str(parsed[-1]) if parsed else ""


class _OutOfTime(BaseException):
    """Raised by the helper's timer; a BaseException, so no `except Exception` swallows it."""


def _serve(read_fd: int, write_fd: int, parent_pid: int) -> None:
    """The helper process: answer ("grade", text, reference, budget_s) and ("extract", text,
    budget_s) requests one at a time, each stopped by a timer after `budget_s`. It leaves when
    the parent closes the pipe or dies (a watcher thread for when it is busy, and a CPU-time
    timer for when it is stuck in C code that holds the interpreter)."""
    import faulthandler
    import logging
    import resource
    import signal
    from multiprocessing.connection import Connection

    logging.disable(logging.CRITICAL)  # math-verify logs whole replies on failures
    faulthandler.enable()  # a helper that crashes says where, on the caller's stderr
    faulthandler.register(signal.SIGPROF, chain=True)
    for limit, value in ((resource.RLIMIT_AS, WORKER_MEMORY_BYTES), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(limit, (value, resource.getrlimit(limit)[1]))
        except (ValueError, OSError):
            pass

    def watch_parent() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()

    def out_of_time(signum, frame):
        raise _OutOfTime

    signal.signal(signal.SIGALRM, out_of_time)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    requests, replies = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    import math_verify  # noqa: F401  (imported before saying ready: it takes a second)

    replies.send(("ready", None))
    while True:
        try:
            op, *args, budget = requests.recv()
        except (EOFError, OSError):
            os._exit(0)
        try:
            # SIGPROF after `budget` + 3 s of CPU time ends the helper (its default action):
            # only ever reached by a helper stuck in C code after its parent died, as a live
            # parent kills it after `budget` / 0.8 s of wall time
            signal.setitimer(signal.ITIMER_PROF, budget + 3)
            signal.setitimer(signal.ITIMER_REAL, budget)
            try:
                value = _grade_here(*args) if op == "grade" else _extract_here(*args)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.setitimer(signal.ITIMER_PROF, 0)
            reply = ("ok", value)
        except _OutOfTime:
            reply = ("timeout", None)
        except Exception as e:  # noqa: BLE001 - a reply that breaks the parser is wrong
            reply = ("error", f"{type(e).__name__}")
        try:
            replies.send(reply)
        except (BrokenPipeError, OSError):
            os._exit(0)


# ---- the caller's side: a small pool of helper processes ----

class _Worker:
    """One helper process and its two pipes; started on first use, replaced after a kill."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.requests = self.replies = None
        self.ready = False

    def start(self) -> None:
        """Start a fresh helper (it imports math-verify, then says ready)."""
        from multiprocessing.connection import Connection

        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        root = str(Path(__file__).resolve().parents[1])
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from eval.graders import _serve; "
                "_serve(*map(int, sys.argv[2:]))")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code, root, str(req_r), str(rep_w), str(os.getpid())],
                pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.requests = Connection(req_w, readable=False)
        self.replies = Connection(rep_r, writable=False)
        self.ready = False

    def stop(self) -> None:
        """Kill the helper (if any) and reap it."""
        for conn in (self.requests, self.replies):
            if conn is not None:
                conn.close()
        self.requests = self.replies = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.proc, self.ready = None, False

    def call(self, request: tuple, timeout: float) -> tuple[str, object]:
        """Send one request and wait `timeout` seconds at most for its reply: ("ok", value),
        ("error" | "timeout", None) from the helper, else ("killed" | "died", None) after
        replacing it (also when the caller is interrupted mid-request)."""
        try:
            for attempt in (1, 2):  # a helper found dead before the request gets one retry
                if self.proc is None:
                    self.start()
                try:
                    if not self.ready:
                        if not self.replies.poll(STARTUP_TIMEOUT_S):
                            raise TimeoutError("grader helper did not start")
                        self.replies.recv()
                        self.ready = True
                    self.requests.send(request)
                    break
                except TimeoutError:
                    raise
                except (EOFError, OSError):
                    self.stop()
                    if attempt == 2:
                        raise
            if self.replies.poll(timeout):
                return self.replies.recv()
            outcome = "killed"
        except (EOFError, OSError, TimeoutError):
            outcome = "died"
        except BaseException:
            self.stop()
            raise
        self.stop()
        self.start()  # the replacement imports math-verify while the caller moves on
        return outcome, None


class _Pool:
    """`size` helpers shared by all threads: a call takes an idle one, or waits its turn when
    all are busy (first come, first served: a freed helper is handed to the oldest waiter), so
    several threads grade at once and no helper ever sees two requests."""

    def __init__(self, size: int) -> None:
        self.pid = os.getpid()
        self.workers = [_Worker() for _ in range(size)]
        self.idle = list(reversed(self.workers))  # popped from the end: the warmest first
        self.waiting: collections.deque[list] = collections.deque()
        self.closed = False
        self.lock = threading.Lock()
        self.stats = {"calls": 0, "ok": 0, "error": 0, "timeout": 0, "killed": 0, "died": 0}

    def _take(self) -> _Worker:
        with self.lock:
            if self.idle and not self.waiting:
                return self.idle.pop()
            turn = [None, threading.Event()]
            self.waiting.append(turn)
        try:
            turn[1].wait()
        except BaseException:
            with self.lock:
                if turn in self.waiting:
                    self.waiting.remove(turn)
            if turn[0] is not None:
                self._give_back(turn[0])
            raise
        return turn[0]

    def _give_back(self, worker: _Worker) -> None:
        with self.lock:
            if self.waiting:
                turn = self.waiting.popleft()
                turn[0] = worker
                turn[1].set()
            else:
                self.idle.append(worker)

    def call(self, request: tuple, timeout: float):
        """The helper's answer to `request`, or None (it failed, ran out of time, or the pool
        is closed)."""
        if self.closed:
            return None
        worker = self._take()
        try:
            status, value = worker.call(request, timeout)
        finally:
            if self.closed:
                worker.stop()
            self._give_back(worker)
        with self.lock:
            self.stats["calls"] += 1
            self.stats[status] += 1
        return value if status == "ok" else None

    def close(self) -> None:
        """Stop every helper (at interpreter exit)."""
        self.closed = True
        for w in self.workers:
            w.stop()


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _Pool:
    """This process's pool (a forked child makes its own rather than share its parent's)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            _POOL = _Pool(max(1, int(os.environ.get(ENV_WORKERS) or DEFAULT_WORKERS)))
            atexit.register(_POOL.close)
        return _POOL


def grader_timeout() -> float:
    """Seconds one math answer may take (`$MARS_GRADER_TIMEOUT_S`, default 5)."""
    return float(os.environ.get(ENV_TIMEOUT) or DEFAULT_TIMEOUT_S)


def grader_stats() -> dict:
    """Counts of this process's calls to the helpers, by outcome: `ok`, `error` (the parser
    raised), `timeout` (stopped by the helper's own timer), `killed` (the caller's timeout ran
    out; the helper was replaced), `died` (the helper was found dead and replaced)."""
    with _POOL_LOCK:
        return dict(_POOL.stats) if _POOL is not None and _POOL.pid == os.getpid() else {}


def _math_call(op: str, text: str, *args: str):
    """Run `op` on the tail of a stripped reply in a helper, within the timeout; None when
    there is nothing to read, the answer would blow up, or the time ran out."""
    text = _tail(text)
    if not text.strip() or _explosive(text):
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
