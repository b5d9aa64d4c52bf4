"""Process groups that never outlive the pipeline (the vLLM server, the DeepSpeed launcher).

`start_group` runs a command in its own session under a keeper (`engines/vllm_ext/
mars_keeper.py`, a child subreaper) that SIGKILLs everything below it once the pipeline's
process is gone (kill -9 included), and whatever the command leaves behind when it exits; the
command itself has PR_SET_PDEATHSIG=SIGKILL towards the keeper. A pid file records the group;
the next start kills a group whose recorded parent died (start times guard against PID reuse)
before starting its own.
"""
from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

KEEPER = Path(__file__).parents[1] / "engines" / "vllm_ext" / "mars_keeper.py"


class ProcessGroupError(RuntimeError):
    """A process group cannot be started safely (one line)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host.strip("[]"), 0))
        return s.getsockname()[1]


def _start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/<pid>/stat field 22); None
    when there is no such live process. Without /proc: 0 for any live process."""
    if not os.path.isdir("/proc"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return 0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def group_tree(pgid: int) -> list[int]:
    """The live (not zombie) members of process group `pgid` and every process below them
    (torchrun starts each rank in a session of its own). Without /proc: [pgid] while the
    group exists."""
    if not os.path.isdir("/proc"):
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except ProcessLookupError:
            return []
    keeper = _keeper_module()
    table = keeper.live_processes()
    members = {p for p, (_, group) in table.items() if group == pgid}
    return sorted(keeper.with_descendants(members, table))


@functools.lru_cache(maxsize=1)
def _keeper_module():
    """`mars_keeper.py` as a module (it lives beside the vLLM extension, outside the package's
    import path, because it runs with `python -I`)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mars_keeper", KEEPER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kill_tree(pgid: int, wait_s: float = 10) -> None:
    """SIGKILL `group_tree(pgid)` until nothing of it is left (waiting up to `wait_s`)."""
    _keeper_module().kill_until_gone(lambda: group_tree(pgid), wait_s)


def take_over(pid_file: Path) -> None:
    """Before starting the group `pid_file` records: if anything of the group it names is
    left and the process that started it is gone (a killed pipeline's leftovers), kill that
    group and what runs below it (`kill_tree`); then remove the file. Left alone: a recorded
    PID that now belongs to another process (another start time). While the leader is gone,
    only leftovers of its group can hold the group's id, so killing the group then is safe.
    Raises ProcessGroupError when the recorded parent (same start time) is alive: that
    process owns the group."""
    try:
        rec = json.loads(Path(pid_file).read_text())
        pid, pgid, start = int(rec["pid"]), int(rec["pgid"]), rec["start"]
        parent, parent_start = int(rec["parent"]), rec["parent_start"]
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError):  # unreadable: nothing to trust in it
        Path(pid_file).unlink(missing_ok=True)
        return
    now = _start_ticks(pid)
    if (now is None and group_tree(pgid)) or (now is not None and now == start):
        if _start_ticks(parent) == parent_start:
            raise ProcessGroupError(f"{pid_file}: process {pid} is still run by the live "
                                    f"process {parent}; stop that one first")
        kill_tree(pgid)
    Path(pid_file).unlink(missing_ok=True)


def start_group(command: list[str], pid_file: str | Path, *, env: dict[str, str] | None = None,
                stdout=None) -> subprocess.Popen:
    """Start `command` in a new session under our keeper (`vllm_ext/mars_keeper.py`: the group
    dies with this process, also when it is killed) after `take_over(pid_file)`; record the
    group in `pid_file` (JSON: pid, pgid, start ticks, parent and its start ticks, command).
    Returns the keeper's Popen (its pid is the group's id); stop it with `stop_group`."""
    pid_file = Path(pid_file)
    take_over(pid_file)
    proc = subprocess.Popen([sys.executable, "-I", str(KEEPER), str(os.getpid()), *command],
                            stdout=stdout, stderr=subprocess.STDOUT if stdout else None, env=env,
                            start_new_session=True)
    rec = {"pid": proc.pid, "pgid": proc.pid, "start": _start_ticks(proc.pid),
           "parent": os.getpid(), "parent_start": _start_ticks(os.getpid()),
           "command": [str(c) for c in command]}
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = pid_file.with_name(pid_file.name + ".tmp")
    tmp.write_text(json.dumps(rec, indent=1))
    os.replace(tmp, pid_file)
    return proc


def stop_group(proc: subprocess.Popen, pid_file: str | Path, grace_s: float = 30) -> None:
    """Stop a group `start_group` started: SIGTERM to all of it, SIGKILL after `grace_s`; then
    remove its pid file."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            break
    if group_tree(proc.pid):  # the keeper was killed on its own: only leftovers hold the id
        kill_tree(proc.pid)
    Path(pid_file).unlink(missing_ok=True)
