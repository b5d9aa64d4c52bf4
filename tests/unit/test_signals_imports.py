"""An interrupt that lands inside Python's import machinery is put off until the main thread
is out of it: raised there, between taking a lock and the `try` that gives it back, it leaves
the import lock held for good, and the next import in another thread (Prefect's event loop)
waits forever (the hang of test_signals' SIGHUP case in CI of stop 74). Real signals, each
case in a process of its own."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

HELD = textwrap.dedent("""
    import _imp, os, signal, sys, threading, time
    from cli import signals
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as from a terminal, not under nohup
    signal.signal(signal.SIGINT, signal.default_int_handler)
    INSTALL
    _imp.acquire_lock()  # as the import machinery holds it, between a lookup's steps
    try:
        os.kill(os.getpid(), signal.SIG)
        for _ in range(30):
            time.sleep(0.01)
        _imp.release_lock()
        print("released", flush=True)
        time.sleep(5)
        print("never interrupted")
    except KeyboardInterrupt:
        held = _imp.lock_held()
        done = []  # another thread imports (a module not loaded yet)
        t = threading.Thread(target=lambda: done.append(__import__("wave")), daemon=True)
        t.start()
        t.join(5)
        print(f"interrupted, import lock held: {held}, another thread imports: {bool(done)}")
""")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_an_interrupt_while_the_import_lock_is_held_waits_for_its_release(sig):
    done = _run(HELD.replace("INSTALL", "signals.handle_like_ctrl_c()").replace("SIG)", sig + ")"))
    assert done.stdout.splitlines() == [
        "released", "interrupted, import lock held: False, another thread imports: True"
    ], done.stderr


def test_without_it_the_interrupt_leaves_the_lock_held_and_imports_hang():
    """The failure it is for, shown: Python's way (a handler that raises where it lands, as
    Ctrl-C's default does) leaves the lock held, and another thread cannot import."""
    done = _run(HELD.replace("INSTALL", "").replace("SIG)", "SIGINT)"))
    assert done.stdout.splitlines() == [
        "interrupted, import lock held: True, another thread imports: False"], done.stderr


def test_an_interrupt_in_a_frame_of_the_import_machinery_comes_a_moment_later():
    """Landing in one of importlib's own frames (a module lock just taken, not yet in its
    `try`), the handler returns and the interrupt comes again after REDELIVER_S; landing in
    any other frame, it is raised there."""
    code = textwrap.dedent("""
        import importlib.abc, signal, sys, time
        from cli import signals
        signal.signal(signal.SIGTERM, signals._as_ctrl_c)  # what the delivery comes to
        frames = []

        class Spy(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                frames.append(sys._getframe(1))  # the import machinery's frame that asked
                return None

        sys.meta_path.insert(0, Spy())
        import colorsys  # noqa: F401
        sys.meta_path.pop(0)
        machinery = frames[0]
        print(machinery.f_globals["__name__"])
        signals._as_ctrl_c(signal.SIGTERM, machinery)
        print("handler returned", flush=True)
        try:
            time.sleep(5)
        except KeyboardInterrupt:
            print("interrupted later")
        try:
            signals._as_ctrl_c(signal.SIGTERM, sys._getframe())
        except KeyboardInterrupt:
            print("raised at once elsewhere")
    """)
    done = _run(code)
    assert done.stdout.splitlines() == [
        "importlib._bootstrap", "handler returned", "interrupted later",
        "raised at once elsewhere"], done.stderr


def test_a_sigint_handler_of_someone_elses_is_kept():
    code = textwrap.dedent("""
        import signal
        from cli import signals
        mine = lambda s, f: None
        signal.signal(signal.SIGINT, mine)
        signals.handle_like_ctrl_c()
        print(signal.getsignal(signal.SIGINT) is mine)
    """)
    assert _run(code).stdout.strip() == "True"


def test_a_second_interrupt_while_the_handler_runs_does_not_raise_in_its_place():
    """A second signal handled while the first one's handler is still deciding (its frames
    below the second's) would raise there, and so in the import machinery's frame the first
    one landed in: it is dropped, the first one (put off) stands for both and comes once."""
    code = textwrap.dedent("""
        import importlib.abc, signal, sys, time
        from cli import signals
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signals._as_ctrl_c)
        frames = []

        class Spy(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                frames.append(sys._getframe(1))
                return None

        sys.meta_path.insert(0, Spy())
        import colorsys  # noqa: F401
        sys.meta_path.pop(0)
        decide, fired = signals._in_import, []

        def second_meanwhile(frame):
            if not fired:
                fired.append(1)
                signal.raise_signal(signal.SIGHUP)  # handled at the next check, in here
                for _ in range(1000):
                    pass
            return decide(frame)

        signals._in_import = second_meanwhile
        signals._as_ctrl_c(signal.SIGTERM, frames[0])
        print("handler returned", flush=True)
        caught = 0
        end = time.time() + 1
        while time.time() < end:
            try:
                time.sleep(0.01)
            except KeyboardInterrupt:
                caught += 1
        print(f"interrupted {caught} time(s), as {signal.Signals(signals._last['signal']).name}")
    """)
    done = _run(code)
    assert done.stdout.splitlines() == ["handler returned", "interrupted 1 time(s), as SIGTERM"], \
        done.stderr


def test_one_put_off_before_the_command_stopped_does_not_land_in_its_exit():
    """Put off while the command was already stopping on an interrupt (a swallowed copy
    delivered again, landing in an import of the crash report's), it is dropped once the
    command has stopped (`settle`): it would land in the exit and end `mars train` by SIGINT
    instead of 130. One that comes after the stop is still delivered."""
    code = textwrap.dedent("""
        import _imp, os, signal, time
        from cli import signals
        signals.handle_like_ctrl_c()

        def put_off_then(stop):
            _imp.acquire_lock()
            try:
                os.kill(os.getpid(), signal.SIGTERM)  # handled here, put off: the lock is held
                time.sleep(0.01)
                if stop:
                    signals.settle()  # the command stops on the interrupt it was handling
            finally:
                _imp.release_lock()
            try:
                for _ in range(50):  # short sleeps: a delivery lands between two
                    time.sleep(0.01)
                return "not delivered"
            except KeyboardInterrupt:
                return "delivered"

        print(put_off_then(stop=True), put_off_then(stop=False))
    """)
    done = _run(code)
    assert done.stdout.strip() == "not delivered delivered", done.stderr


@pytest.mark.parametrize("guarded", [True, False])
def test_prefects_sigterm_handler_during_a_flow_waits_for_the_import_lock_too(guarded):
    """While a flow runs, SIGTERM goes to Prefect's handler (`capture_sigterm`), which raises
    its TerminationSignal where it lands; guarded (`guard_prefect`, as every mars command that
    runs flows does), it waits for the lock's release like ours; unguarded (the premise), it
    raises while the lock is held (looped runs of test_signals' SIGTERM case hung on it)."""
    code = textwrap.dedent("""
        import _imp, os, signal, time
        from cli import signals
        from prefect.utilities.engine import capture_sigterm
        signals.handle_like_ctrl_c()
        GUARD
        try:
            with capture_sigterm():
                _imp.acquire_lock()
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                    for _ in range(30):
                        time.sleep(0.01)
                except BaseException as e:
                    print(f"{type(e).__name__} while the lock was held", flush=True)
                    raise
                finally:
                    _imp.release_lock()
                print("released", flush=True)
                for _ in range(300):
                    time.sleep(0.01)
        except BaseException as e:
            print(f"stopped: {type(e).__name__}")
    """).replace("GUARD", "signals.guard_prefect()" if guarded else "")
    done = _run(code)
    lines = done.stdout.splitlines()
    assert lines[:-1] == (["released"] if guarded else
                          ["TerminationSignal while the lock was held"]), done.stderr
    assert lines[-1] in ("stopped: TerminationSignal", "stopped: KeyboardInterrupt"), done.stderr


def test_an_interrupt_in_a_modules_body_waits_until_its_import_is_done(tmp_path):
    """Landing in the body of a module being imported (outside importlib's own frames), the
    interrupt waits until the import is done: the module is whole, and imported."""
    (tmp_path / "slow_module.py").write_text(textwrap.dedent("""
        import os, signal, time
        os.kill(os.getpid(), signal.SIGTERM)  # handled here, in the module's body
        for _ in range(30):
            time.sleep(0.01)
        WHOLE = True
    """))
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(tmp_path)!r})
        from cli import signals
        signals.handle_like_ctrl_c()
        try:
            import slow_module
            for _ in range(100):
                time.sleep(0.01)
            print("never interrupted")
        except KeyboardInterrupt:
            whole = getattr(sys.modules.get("slow_module"), "WHOLE", False)
            print("interrupted, module whole:", whole)
    """)
    done = _run(code)
    assert done.stdout.strip() == "interrupted, module whole: True", done.stderr
