"""SIGTERM and SIGHUP (a `kill`, a closed terminal, a stopping service manager) handled like
Ctrl-C by every `mars` command: they raise KeyboardInterrupt in the main thread, so a flow
ends the way an interrupted one does (Prefect marks its run Crashed, the run folder is
unlocked, a resumable command says so) and the process exits normally, running its exit
handlers (Prefect's temporary server is stopped by one).

Prefect's temporary server (the one a `mars` command starts without PREFECT_API_URL) is started
here, by the main thread, in a session of its own: a signal sent to the command's whole process
group (a closed terminal, `kill -- -PGID`, Ctrl-C) then reaches the command only, and the server
stays up until the command has reported its flow run's end, then goes with the command's exit
(Prefect's exit handler stops it). (In the command's group it died first, and the command spent
minutes retrying a gone API.) It also gets SIGTERM when the command is gone without stopping it
(kill -9): Linux's parent-death signal, which follows the thread that started it, the main one.
It serves cli/prefect_app.py's `temporary_app`, Prefect's app whose shutdown waits until the
server has recorded the events the command sent (its last task runs), and the command's exit
waits for that (up to STOP_S) instead of Prefect's 5 s before a kill: a rerun that skips every
task ends with its summary, not with the server's recorder cancelled mid-write.

An interrupt whose KeyboardInterrupt is raised while the main thread runs a finalizer (a
`__del__`, a weakref callback such as SQLAlchemy's, the garbage collector's) is swallowed by
Python ("Exception ignored in ...") and the command would run on to its end. Such a swallowed
interrupt is delivered again, as the same signal, a moment later (`_redeliver`, installed as
`sys.unraisablehook`), until it reaches the command's code.

An interrupt that lands inside an import (Python's import machinery, or a module's body it
runs) is put off the same way, until the import is done. A KeyboardInterrupt raised between
the machinery taking a lock and the `try` that releases it leaves the interpreter's import
lock (or a module's) held by the main thread for good, and the next import in another thread
(Prefect's event loop, where the command waits for its flow run's end) waits forever: the hang
of test_signals' SIGHUP case in CI of stop 74, its loop thread stuck in `_get_module_lock`.
One raised in a module's body leaves it half made. Prefect's own SIGTERM handler, installed
while a flow runs, is guarded the same way (`guard_prefect`). `bench/interrupt_imports.py`
shows the leak and its end.
"""
from __future__ import annotations

import _imp
import contextlib
import ctypes
import _thread
import functools
import os
import signal
import subprocess
import sys
import threading

INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # prctl(2)
STOP_S = 120.0  # the temporary server's shutdown (its event backlog recorded) before a kill
PREFECT_FACTORY = "prefect.server.api.server:create_app"
TEMPORARY_FACTORY = "cli.prefect_app:temporary_app"
REDELIVER_S = 0.05  # a finalizer that swallowed an interrupt has returned by then (or is retried)
# the interrupt last received, to deliver again if swallowed; stops: how many times the
# command has stopped on one (`settle`): a copy scheduled before that is not delivered
_last = {"signal": signal.SIGINT, "stops": 0}


# the import machinery's own frames: an exception raised in one can leave a lock held
IMPORT_MODULES = frozenset({"importlib._bootstrap", "importlib._bootstrap_external",
                            "_frozen_importlib", "_frozen_importlib_external"})


def _in_import(frame) -> bool:
    """The main thread, interrupted at `frame`, is importing a module (the import machinery
    below `frame`: in its own code, or running the module's body), or a thread holds the
    interpreter's import lock (taken around every lookup of a module's lock). A module whose
    body was cut short is left half made, its side effects registered (SQLAlchemy's
    `orm.instrumentation` cut so, twice, and `mars train` then ended by SIGINT, not 130)."""
    if _imp.lock_held():
        return True
    while frame is not None:
        if frame.f_globals.get("__name__") in IMPORT_MODULES:
            return True
        frame = frame.f_back
    return False


def import_safe(handler):
    """`handler` (a signal handler that raises) run only outside an import: landing inside
    one, the signal comes again after REDELIVER_S, until it lands outside; landing while
    a guarded handler is already running (a second interrupt), it is dropped: the first one
    raises or is put off, and stands for both."""
    def guarded(signum, frame):
        if _nested(frame):
            return None
        if _in_import(frame):
            _later(_deliver_unless_stopped, signum, _last["stops"])
            return None
        return handler(signum, frame)

    guarded.unguarded = handler
    return guarded


def _nested(frame) -> bool:
    while frame is not None:
        if frame.f_code is _GUARDED:
            return True
        frame = frame.f_back
    return False


def _raise_ctrl_c(signum, frame):
    _last["signal"] = signum
    raise KeyboardInterrupt


_as_ctrl_c = import_safe(_raise_ctrl_c)
_GUARDED = _as_ctrl_c.__code__


def guard_prefect() -> None:
    """Prefect's own SIGTERM handler, which raises its TerminationSignal wherever it lands while
    a flow runs (`prefect.utilities.engine.capture_sigterm` installs it), made `import_safe`
    too: it left the import lock held as Python's way does, and `mars train` sent SIGTERM hung
    in Prefect's crash report (looped runs of test_signals' SIGTERM case). `capture_sigterm`
    reads the handler from its module, so the guarded one is what it installs and recognises."""
    from prefect.utilities import engine

    handler = getattr(engine, "_prefect_sigterm_handler", None)
    if handler is not None and not hasattr(handler, "unguarded"):
        engine._prefect_sigterm_handler = import_safe(handler)


def _deliver_unless_stopped(signum, stops: int) -> None:
    """An interrupt put off comes now, unless the command has stopped on one since (`settle`):
    it would land in the exit (a copy delivered again by `_redeliver` and put off while the
    command was stopping on the first one ended `mars train` by SIGINT instead of 130)."""
    if _last["stops"] == stops:
        _thread.interrupt_main(signum)


def _later(call, *args) -> None:
    timer = threading.Timer(REDELIVER_S, call, args)
    timer.daemon = True  # never holds the exit
    timer.start()


def _redeliver(unraisable, previous=sys.unraisablehook) -> None:
    """`sys.unraisablehook`: a KeyboardInterrupt that Python swallowed (raised inside a
    finalizer) comes again as the same signal after REDELIVER_S; anything else as before."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        previous(unraisable)
        return
    if not _last["stops"]:
        _later(_deliver_unless_stopped, _last["signal"], 0)


def settle() -> None:
    """The command has stopped on an interrupt (it says so and exits 130): a copy of it that a
    finalizer swallowed on the way out (a generator closed by the garbage collector re-raising
    it) is not delivered again, where it would land in the exit itself and end the process by
    SIGINT instead of 130 (a CI failure of `tests/e2e/test_signals.py`). A new signal still
    interrupts (a second Ctrl-C stops the temporary server at once)."""
    _last["stops"] += 1


def handle_like_ctrl_c() -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt in this process from now on, as SIGINT
    does, exit handlers included, and none of the three inside the import machinery. One the
    process was started ignoring stays ignored (`nohup mars ...` outlives its terminal), and
    a SIGINT handler of someone else's stays; a no-op outside the main thread (no signals
    there)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if getattr(sys.unraisablehook, "func", None) is not _redeliver:
        sys.unraisablehook = functools.partial(_redeliver, previous=sys.unraisablehook)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _as_ctrl_c)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _as_ctrl_c)


@contextlib.contextmanager
def deferred():
    """No interrupt while the block runs (stopping servers: a second Ctrl-C or a SIGHUP after
    the first must not leave them half-stopped); handlers restored after it."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in INTERRUPTS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _prctl():
    """Linux's prctl(2), looked up before a fork (the child only calls it); None elsewhere."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with(prctl, parent: int) -> None:
    """In the server's process before exec: SIGTERM when `parent` (its thread) is gone."""
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # gone before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


class _OwnSession:
    """`subprocess` as Prefect's server module sees it, except that Popen starts a new session,
    with the parent-death signal when the main thread starts it."""

    def __getattr__(self, name):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(*args, **kwargs):  # noqa: N802 (subprocess's name)
        argv = kwargs.get("args")
        if isinstance(argv, list) and PREFECT_FACTORY in argv:  # Prefect's uvicorn command
            kwargs["args"] = [TEMPORARY_FACTORY if a == PREFECT_FACTORY else a for a in argv]
        kwargs.setdefault("start_new_session", True)
        prctl = _prctl()
        if prctl is not None and threading.current_thread() is threading.main_thread():
            kwargs.setdefault("preexec_fn", functools.partial(_die_with, prctl, os.getpid()))
        return subprocess.Popen(*args, **kwargs)


def _stop_server(server) -> None:
    """Prefect's `SubprocessASGIServer.stop` (an exit handler), quietly and with time for the
    server's own shutdown (STOP_S, its events recorded) before a kill; an interrupt while it
    waits kills it at once."""
    process = server.server_process
    if process is not None:
        try:
            process.terminate()
            process.wait(timeout=STOP_S)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            process.kill()
            process.wait()
        server.server_process = None
    server._instances.pop(getattr(server, "_instance_key", server.port), None)
    server.running = False


def start_temporary_server() -> None:
    """Prefect's temporary server for this process's flows, started now (by the main thread:
    Prefect would start it on first use, from whichever thread) in a session of its own,
    serving `temporary_app`, stopped at exit by `_stop_server`."""
    from prefect.server.api import server

    server.subprocess = _OwnSession()
    temporary = server.SubprocessASGIServer()
    temporary.stop = functools.partial(_stop_server, temporary)  # before start registers it
    temporary.start()
