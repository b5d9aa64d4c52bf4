"""SIGTERM and SIGHUP stop `mars` as Ctrl-C does, on real processes: `mars train` signalled
once its flow runs (to the process, as `kill PID` does; to its whole process group, as a
closed terminal does) exits 130 with the interrupted line, its flow run marked Crashed, and
nothing it started left (Prefect's temporary server included); `mars services` sent SIGHUP
stops both servers, their process groups with them, and frees the ports."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from cli.services import port_taken
from mars_core.run.layout import CONFIG_FILE
from mars_core.run.procgroup import free_port
from tests.conftest import REPO
from tests.servers import mars_cmd

pytestmark = pytest.mark.timeout(600)


def _table() -> dict[int, tuple[int, int]]:
    """Every live process: pid -> (parent pid, start time in clock ticks)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] not in ("Z", "X"):
                out[int(entry)] = (int(fields[1]), int(fields[19]))
    return out


def _descendants(pid: int) -> dict[int, int]:
    """The processes below `pid` now (whatever session they moved to): pid -> start time."""
    table, found, todo = _table(), {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, start) in table.items():
            if ppid == parent and child not in found:
                found[child] = start
                todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return ""


def _left(procs: dict[int, int]) -> list[str]:
    table = _table()
    return [f"{p}: {_cmdline(p)}" for p, start in procs.items()
            if p in table and table[p][1] == start]


def _kill(proc: subprocess.Popen, below: dict[int, int]) -> None:
    """A failed test: the command and all below it, gone."""
    for p in [proc.pid, *below]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def _default_signals() -> None:
    """In the child before exec: the interrupts at their defaults, as a terminal starts a
    command, whatever this test process inherited or was left with (an ignored SIGTERM or
    SIGHUP is inherited across exec, and `mars` keeps an ignored one ignored, as `nohup`
    asks: the test would then see the run finish instead of stopping)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _start(args: list[str], env: dict, out: Path) -> subprocess.Popen:
    """`mars ARGS` as a terminal starts it: in a process group (and session) of its own."""
    with open(out, "w") as f:
        return subprocess.Popen(mars_cmd(*args), env=env, cwd=REPO, stdout=f,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_default_signals)


def _until(proc: subprocess.Popen, out: Path, ready, timeout: float = 400) -> None:
    end = time.time() + timeout
    while not ready():
        assert proc.poll() is None, out.read_text()[-3000:]
        assert time.time() < end, out.read_text()[-3000:]
        time.sleep(0.2)


def _stopped(proc: subprocess.Popen, out: Path, below: dict[int, int]) -> int:
    """Wait for `proc` to exit; nothing of what was below it, nor of its group, is left."""
    try:
        rc = proc.wait(timeout=300)
    except subprocess.TimeoutExpired:  # where every thread waits, into the log (faulthandler)
        os.kill(proc.pid, signal.SIGABRT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        _kill(proc, {**below, **_descendants(proc.pid)})
        pytest.fail(f"still running 300 s after the signal:\n{out.read_text()[-12000:]}")
    end = time.time() + 30  # a process exits, then its parent reaps it
    while _left(below) and time.time() < end:
        time.sleep(0.2)
    assert not _left(below), f"left running: {_left(below)}\n{out.read_text()[-3000:]}"
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
    return rc


@pytest.mark.parametrize("sig,to", [(signal.SIGTERM, "process"), (signal.SIGHUP, "group")],
                         ids=["SIGTERM-to-the-process", "SIGHUP-to-its-group"])
def test_a_signalled_train_stops_like_ctrl_c(tmp_path, tiny_model_dir, sig, to):
    runs, out, home = tmp_path / "runs", tmp_path / "out.log", tmp_path / "home"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(home),
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",  # 2 busy cores
           "PYTHONFAULTHANDLER": "1"}  # a hang's threads dumped on SIGABRT (`_stopped`)
    env.pop("PREFECT_API_URL", None)  # Prefect's temporary server, started by the command
    overlay = tmp_path / "tiny.yaml"
    overlay.write_text(f"model:\n  path: {tiny_model_dir}\nrun:\n  iterations: 1\n")
    proc = _start(["train", "--config", "configs/smoke.yaml", "--overlay", str(overlay),
                   "--runs-dir", str(runs), "--run-name", "sig"], env, out)
    try:
        _until(proc, out, lambda: (runs / "sig" / CONFIG_FILE).is_file())  # the flow runs
        below = _descendants(proc.pid)
        assert any("uvicorn" in _cmdline(p) for p in below), "no temporary Prefect server"
        (os.kill if to == "process" else os.killpg)(proc.pid, sig)
    except BaseException:
        _kill(proc, _descendants(proc.pid))
        raise
    rc = _stopped(proc, out, below)
    text = out.read_text()
    assert rc == 130, text[-3000:]
    assert "mars: interrupted; run the same command again to resume" in text
    with sqlite3.connect(home / "prefect.db") as db:
        states = [s for (s,) in db.execute("SELECT state_type FROM flow_run")]
    assert states and all(s in ("CRASHED", "CANCELLED") for s in states), states


def test_sighup_stops_mars_services_and_both_servers(tmp_path):
    pp, mp, out = free_port(), free_port(), tmp_path / "out.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "home"),
           "PYTHONFAULTHANDLER": "1"}
    proc = _start(["services", "--prefect-port", str(pp), "--mlflow-port", str(mp),
                   "--runs-dir", str(tmp_path / "runs")], env, out)
    try:
        _until(proc, out, lambda: "services running" in out.read_text())
        below = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGHUP)  # the terminal is closed
    except BaseException:
        _kill(proc, _descendants(proc.pid))
        raise
    rc = _stopped(proc, out, below)
    assert rc == 0, out.read_text()[-3000:]
    assert out.read_text().rstrip().endswith("mars: services stopped")
    assert not port_taken("127.0.0.1", pp) and not port_taken("127.0.0.1", mp)
