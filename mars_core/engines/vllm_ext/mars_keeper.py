"""The keeper of a process tree: `python -I mars_keeper.py PARENT_PID COMMAND...` (standard
library only, so any Python runs it; `mars_core.run.procgroup.start_group` starts it as
the leader of a new session, for the vLLM server and the DeepSpeed launcher alike).

It runs COMMAND as its child and makes everything below it die with the pipeline:
- the keeper is a child subreaper (Linux): a process of the tree whose parent dies is
  re-parented to the keeper, not to init, so the whole tree stays findable, also the
  processes that left our group (torchrun starts each rank in a session of its own);
- the command gets PR_SET_PDEATHSIG=SIGKILL: it dies when the keeper dies;
- every 0.2 s the keeper checks that PARENT_PID is still its parent; once it is not (the
  pipeline exited or was killed, kill -9 included), it SIGKILLs the tree and its group;
- when the command exits, whatever it left behind (vLLM's engine core and worker survive a
  killed API server; DeepSpeed's ranks survive a killed launcher) is SIGKILLed, and the keeper
  exits with the command's status (128 + signal when it was killed).
SIGTERM sent to the group (a normal stop) reaches the command, which shuts down; the keeper
ignores it and waits for the command.
"""
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


def prctl(option: int, value: int) -> bool:
    """Linux's prctl(2); False where there is none."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_keeper(keeper: int) -> None:
    """In the command's process before exec: SIGKILL when the keeper goes (Linux only)."""
    if prctl(PR_SET_PDEATHSIG, signal.SIGKILL) and os.getppid() != keeper:
        os.kill(os.getpid(), signal.SIGKILL)  # the keeper died before prctl took effect


def live_processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every live (not zombie) process, from /proc;
    {} without /proc. Shared with `procgroup.group_tree`."""
    table = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            table[int(name)] = (int(fields[1]), int(fields[2]))
    return table


def with_descendants(roots: set[int], table: dict[int, tuple[int, int]]) -> set[int]:
    """`roots` and every process below them, by parent links in `table`."""
    found, todo = set(roots), list(roots)
    while todo:
        parent = todo.pop()
        kids = [p for p, (pp, _) in table.items() if pp == parent and p not in found]
        found.update(kids)
        todo += kids
    return found


def below_us() -> list[int]:
    """The live (not zombie) processes below the keeper (by parent links) or in its group,
    from /proc; [] without /proc."""
    me, table = os.getpid(), live_processes()
    group = {p for p, (_, pgid) in table.items() if pgid == me}
    return sorted((with_descendants({me}, table) | group) - {me})


def reap(child: int) -> int | None:
    """Reap every ended child (adopted orphans included); the command's exit status when it
    is among them."""
    code = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return code
        if pid == 0:
            return code
        if pid == child:
            code = os.waitstatus_to_exitcode(status)


def kill_until_gone(find, wait_s: float, between=lambda: None) -> None:
    """SIGKILL the processes `find()` returns until it returns none (at most `wait_s`),
    calling `between()` after each round. Shared with `mars_core.run.procgroup.kill_tree`."""
    deadline = time.monotonic() + wait_s
    while (pids := find()) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
        between()


def kill_all_below(child: int) -> None:
    """SIGKILL everything below the keeper until nothing is left (at most a few seconds)."""
    kill_until_gone(below_us, 5, lambda: reap(child))


def main(argv: list[str]) -> int:
    parent, command = int(argv[0]), argv[1:]
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGTERM, lambda *_: None)  # a handler, not SIG_IGN: exec resets it
    keeper = os.getpid()
    # kept referenced: a collected Popen would reap the command itself, status and all
    proc = subprocess.Popen(command, preexec_fn=lambda: die_with_keeper(keeper))
    code = None
    while code is None:
        time.sleep(0.2)
        code = reap(proc.pid)
        if code is None and os.getppid() != parent:  # the pipeline is gone: so is its tree
            kill_all_below(proc.pid)
            os.killpg(0, signal.SIGKILL)
    proc.returncode = code  # reaped here, not by Popen
    kill_all_below(proc.pid)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
