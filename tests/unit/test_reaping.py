"""Processes the pipeline starts never outlive it (`procgroup.start_group`, used for the vLLM
server and the DeepSpeed launcher): their process group dies with the process that started it,
kill -9 included, and the next start takes over the pid file a killed pipeline left behind.
Real processes throughout; the vLLM server's stand-in is a small HTTP server that answers
/health and runs a process of its own, in a session of its own (as torchrun starts ranks):
out of the group, still below the keeper."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mars_core.engines.vllm_server import VLLMError, VLLMServer
from mars_core.run.procgroup import (ProcessGroupError, free_port, group_tree, kill_tree,
                                     start_group, stop_group, take_over)
from mars_core.engines.vllm_ext.mars_keeper import live_processes
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux's /proc")

STAND_IN = textwrap.dedent("""
    import http.server, subprocess, sys
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                     start_new_session=True)
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
""")

# a pipeline process: starts a VLLMServer with the command in argv[2], prints its pid, waits
PIPELINE = textwrap.dedent("""
    import json, sys, time
    from mars_core.engines.vllm_server import VLLMServer
    server = VLLMServer(json.loads(sys.argv[2]), log_path=sys.argv[1], startup_timeout_s=60)
    server.start()
    print(server.process.pid, flush=True)
    time.sleep(600)
""")

# a pipeline process that starts a bare group (a shell with a background child) and waits
GROUP = textwrap.dedent("""
    import sys, time
    from mars_core.run.procgroup import start_group
    proc = start_group(["sh", "-c", "sleep 600 & sleep 600"], sys.argv[1])
    print(proc.pid, flush=True)
    time.sleep(600)
""")


def stand_in() -> list[str]:
    return [sys.executable, "-c", STAND_IN, "--host", "127.0.0.1", "--port", str(free_port())]


def members(pgid: int) -> list[int]:
    """The live (not zombie) processes of group `pgid`."""
    return [pid for pid, (_, group) in live_processes().items() if group == pgid]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def gone_within(pgid: int, seconds: float, pids: list[int] = ()) -> bool:
    """Whether group `pgid`, everything below it and `pids` are gone within `seconds`."""
    deadline = time.monotonic() + seconds
    while group_tree(pgid) or any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _pipeline(script: str, *args: str) -> tuple[subprocess.Popen, int]:
    """Start a pipeline process running `script`; (it, the group id it printed)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                            text=True, cwd=REPO, env=env)
    line = proc.stdout.readline()
    assert line.strip().isdigit(), f"the pipeline process did not start its group: {line!r}"
    return proc, int(line)


def _cleanup(proc: subprocess.Popen, pgid: int | None) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if pgid is not None:
        kill_tree(pgid)


def test_a_killed_pipeline_takes_the_server_group_along(tmp_path):
    log = tmp_path / "vllm_server.log"
    proc, pgid = _pipeline(PIPELINE, str(log), json.dumps(stand_in()))
    try:
        record = json.loads((tmp_path / "vllm_server.pid").read_text())
        assert (record["pid"], record["pgid"], record["parent"]) == (pgid, pgid, proc.pid)
        assert record["start"] > 0 and record["command"][0] == sys.executable
        started = group_tree(pgid)
        assert len(started) == 3  # the keeper, the server, the server's own process
        assert len(members(pgid)) == 2  # that one in a session of its own
        proc.kill()  # kill -9 of the pipeline
        proc.wait()
        assert gone_within(pgid, 5, started)
    finally:
        _cleanup(proc, pgid)


def test_stop_ends_the_whole_group_and_a_second_start_is_refused(tmp_path):
    server = VLLMServer(stand_in(), log_path=tmp_path / "vllm_server.log", startup_timeout_s=60)
    server.start()
    pgid = server.process.pid
    try:
        started = group_tree(pgid)
        assert len(started) == 3 and server.pid_file == tmp_path / "vllm_server.pid"
        twin = VLLMServer(stand_in(), log_path=tmp_path / "vllm_server.log")
        with pytest.raises(VLLMError, match=rf"still run by the live process {os.getpid()}"):
            twin.start()  # this process owns the group the pid file names: left alone
        assert group_tree(pgid) == started and server.gone() is None
        server.stop()
        assert gone_within(pgid, 5, started) and not server.pid_file.exists()
    finally:
        server.stop()


def test_the_server_group_goes_when_its_server_dies(tmp_path):
    """The server's own processes (vLLM's engine core) do not outlive it; `gone` says how it
    ended."""
    server = VLLMServer(stand_in(), log_path=tmp_path / "vllm_server.log", startup_timeout_s=60)
    server.start()
    pgid = server.process.pid
    try:
        started = group_tree(pgid)
        [main_process] = [p for p in started if _parent(p) == pgid]
        os.kill(main_process, signal.SIGKILL)
        assert gone_within(pgid, 5, started)
        assert server.gone(wait_s=5).startswith(f"the vLLM server (pid {pgid}) died (killed by "
                                                "SIGKILL); log: ")
    finally:
        server.stop()
    assert not server.pid_file.exists()


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("keeper_fate", [signal.SIGSTOP, signal.SIGKILL])
def test_a_pid_file_left_by_a_killed_pipeline_is_taken_over(tmp_path, keeper_fate):
    """The pipeline was killed while its keeper could not act (stopped; or killed first, which
    takes the command along but not the command's own children): the next start kills what is
    left of that group, then starts its own."""
    pid_file = tmp_path / "deepspeed.pid"
    proc, pgid = _pipeline(GROUP, str(pid_file))
    new = None
    try:
        deadline = time.monotonic() + 10
        while len(members(pgid)) < 3 and time.monotonic() < deadline:  # keeper, sh, 2 sleeps
            time.sleep(0.05)
        os.kill(pgid, keeper_fate)
        time.sleep(0.5)
        proc.kill()
        proc.wait()
        time.sleep(0.5)
        left = members(pgid)
        assert left, "nothing of the old group is left to take over"
        new = start_group(["sleep", "600"], pid_file)
        assert gone_within(pgid, 5)
        record = json.loads(pid_file.read_text())
        assert (record["pid"], record["parent"], record["command"]) == (new.pid, os.getpid(),
                                                                       ["sleep", "600"])
        stop_group(new, pid_file)
        assert gone_within(new.pid, 5) and not pid_file.exists()
    finally:
        _cleanup(proc, pgid)
        if new is not None:
            kill_tree(new.pid)


def test_a_pid_file_naming_a_reused_pid_kills_nothing(tmp_path):
    """The recorded process is gone and its pid now belongs to another process (another start
    time): that process is left alone; the stale file goes."""
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        start = int(Path(f"/proc/{other.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        pid_file = tmp_path / "vllm_server.pid"
        pid_file.write_text(json.dumps({"pid": other.pid, "pgid": other.pid, "start": start - 1,
                                        "parent": dead.pid, "parent_start": 1,
                                        "command": ["sleep", "600"]}))
        take_over(pid_file)
        assert other.poll() is None and not pid_file.exists()
        pid_file.write_text("not json")  # unreadable: nothing to trust, nothing killed
        take_over(pid_file)
        assert other.poll() is None and not pid_file.exists()
    finally:
        other.kill()
        other.wait()


def test_a_group_of_a_live_process_is_taken_over_only_once_it_ended(tmp_path):
    pid_file = tmp_path / "g.pid"
    proc = start_group(["sleep", "600"], pid_file)
    try:
        with pytest.raises(ProcessGroupError, match=r"g\.pid: process \d+ is still run by the "
                                                    rf"live process {os.getpid()}"):
            start_group(["sleep", "600"], pid_file)
        assert proc.poll() is None
    finally:
        stop_group(proc, pid_file)
    assert proc.poll() is not None and not pid_file.exists()
    ended = start_group(["true"], pid_file)
    ended.wait(timeout=10)
    assert gone_within(ended.pid, 5) and pid_file.exists()  # it ended; nobody removed its file
    again = start_group(["sleep", "600"], pid_file)  # nothing of that group is left: no error
    stop_group(again, pid_file)
