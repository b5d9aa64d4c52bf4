"""The grader's helper processes: math answers are parsed and compared (math-verify) in a
small pool of persistent helpers started with a fresh interpreter, each answer under a timer in
the helper and a deadline in the caller, who kills and replaces a helper that runs past it
(see `eval.graders`)."""
from __future__ import annotations

import atexit
import collections
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from eval.answers import read_prediction

ENV_TIMEOUT = "MARS_GRADER_TIMEOUT_S"
ENV_WORKERS = "MARS_GRADER_WORKERS"
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_WORKERS = 2
STARTUP_TIMEOUT_S = 120.0  # a helper process that has not imported math-verify by then failed
WORKER_MEMORY_BYTES = 4 << 30  # a helper's address space; past it an answer fails, not the host


def _grade_here(text: str, reference: str) -> bool:
    """Whether `text` (a stripped, bounded reply) holds `reference` (math-verify, unbounded:
    only run inside a helper process under its timer)."""
    from math_verify import parse, verify

    gold = parse(f"${reference}$", parsing_timeout=None)
    if not gold:
        gold = parse(reference, parsing_timeout=None)
    pred = read_prediction(text)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=None))


def _extract_here(text: str) -> str:
    """What `_grade_here` reads as the final answer of `text` ("" when nothing)."""
    parsed = read_prediction(text)
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
        code = ("import sys; sys.path.insert(0, sys.argv[1]); "
                "from eval.grader_pool import _serve; _serve(*map(int, sys.argv[2:]))")
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
