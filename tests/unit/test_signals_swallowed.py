"""An interrupt raised while the main thread runs a finalizer is swallowed by Python
("Exception ignored in ..."); `cli.signals` delivers it again so the command still stops
(the CI failure of stop 38: a SIGHUP landed in SQLAlchemy's weakref callback and `mars train`
ran to its end with exit code 0)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

PROGRAM = textwrap.dedent("""
    import gc, os, signal, sys, time, weakref
    from cli import signals
    # as a command started from a terminal: under `nohup` (a suite run that way) SIGHUP comes
    # ignored, and the handler rightly leaves an ignored signal ignored
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    {install}

    class Thing:
        pass

    def finalizer(ref):  # runs the interrupt's handler inside a weakref callback
        signal.raise_signal(signal.{sig})
        for _ in range(100000):
            pass

    thing = Thing()
    ref = weakref.ref(thing, finalizer)
    try:
        del thing
        gc.collect()
        end = time.time() + 5
        while time.time() < end:
            time.sleep(0.01)
    except KeyboardInterrupt:
        print("interrupted")
        sys.exit(130)
    print("ran to the end")
""")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_an_interrupt_swallowed_by_a_finalizer_is_delivered_again(sig):
    code = PROGRAM.format(install="signals.handle_like_ctrl_c()", sig=sig)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (130, "interrupted"), done.stderr


def test_without_the_hook_python_swallows_it():
    """The failure the hook is for, shown: Python's own behaviour (the test's premise)."""
    code = PROGRAM.format(install="signal.signal(signal.SIGTERM, signals._as_ctrl_c)",
                          sig="SIGTERM")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "Exception ignored" in done.stderr, done.stderr


def test_other_unraisable_errors_still_reach_the_previous_hook():
    code = textwrap.dedent("""
        import sys
        seen = []
        sys.unraisablehook = lambda u: seen.append(type(u.exc_value).__name__)
        from cli import signals
        signals.handle_like_ctrl_c()
        signals.handle_like_ctrl_c()  # twice: installed once
        class Bad:
            def __del__(self):
                raise ValueError("x")
        Bad()
        print(seen)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == "['ValueError']", done.stderr
