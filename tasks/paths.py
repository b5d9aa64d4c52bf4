"""Who may use a run folder, its config and its identity (the folder's layout: `mars_core.run.layout`).

Run names are plain (letters, digits, `.`, `_`, `-`), and one
process at a time holds a run folder's lock (`.lock`, an advisory `flock`: the kernel drops it
when its holder dies, so a lock left by a killed process is simply taken over).

A run is its random key (`run_key.json`, written with `config.yaml` when the folder is made),
not its path: MLflow finds the run's tracking run by it (the tag `mars.key`), so a folder
deleted and made again under the same name is a new MLflow run and a new model version,
while a resume of the same folder keeps its key.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import time
import uuid
from pathlib import Path

from mars_core.config import Config, ConfigError, config_diff, dump_config, load_config
from mars_core.run.layout import CONFIG_FILE, LOCK_FILE, PRIVATE_CONFIG_FILE, RUN_KEY_FILE
from mars_core.run.commit import read_json, write_json
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")  # whole name: use fullmatch


class RunDirError(Exception):
    """A run directory that cannot be used as asked (one-line message)."""


def check_run_name(name: str, what: str = "--run-name") -> str:
    """`name` when it is a plain folder name (letters, digits, `.`, `_`, `-`, starting with a
    letter or digit), else a RunDirError: `../x`, `a/b` or `~x` never leave the runs folder."""
    if not isinstance(name, str) or not RUN_NAME.fullmatch(name):  # `$` would take "demo\n"
        raise RunDirError(f"{what} {name!r}: use letters, digits, '.', '_' and '-' only (starting "
                          "with a letter or digit, at most 200 characters)")
    return name


def run_dir_for(runs_dir: str | Path, name: str, what: str = "--run-name") -> Path:
    return Path(runs_dir) / check_run_name(name, what)


# The configs this process was given, by run folder: they hold the real secrets, which
# config.yaml does not (mars_core.privacy.redact). Tasks in this process read these.
_LIVE: dict[str, Config] = {}


def read_config(run_dir: Path) -> Config:
    """The run's config with its secrets: this process's own, else (a shard worker in another
    process) the private copy a running run with secrets keeps (`tasks.shards.share_config`),
    else `config.yaml` (secrets masked)."""
    live = _LIVE.get(str(Path(run_dir).resolve()))
    if live is not None:
        return live
    private = Path(run_dir) / PRIVATE_CONFIG_FILE
    return load_config(private if private.is_file() else Path(run_dir) / CONFIG_FILE)


# what a resume may change: where the games run, and how a batch is cut into micro-batches
# or whether activations are recomputed (gradient accumulation: the same update, less memory;
# so a run killed for memory resumes with a smaller micro-batch)
RESUMABLE_CHANGES = ("cluster.", "optim.micro_batch_size", "warmup.micro_batch_size",
                     "trainer.gradient_checkpointing")


def check_run_dir(run_dir: Path, cfg: Config) -> list[str] | None:
    """What `prepare_run_dir` would refuse, found without writing anything: a run folder made
    with another config, or a folder that is no run. None for a new run, else a run to resume
    and how its config differs (only in `RESUMABLE_CHANGES`: the results are the same)."""
    run_dir = Path(run_dir)
    saved = run_dir / CONFIG_FILE
    if saved.is_file():
        try:
            old = load_config(saved)
        except ConfigError as e:
            raise RunDirError(f"run directory {run_dir} has an unreadable config: {e}") from None
        diff = config_diff(old, cfg)
        if any(not k.startswith(RESUMABLE_CHANGES) for k in diff):
            raise RunDirError(f"run directory {run_dir} was created with a different config "
                              f"(differs in: {', '.join(diff[:5])}); choose another --run-name")
        return diff
    if run_dir.exists() and any(p.name not in (LOCK_FILE, RUN_KEY_FILE)
                                for p in run_dir.iterdir()):
        raise RunDirError(f"{run_dir} exists and is not a run directory (no {CONFIG_FILE})")
    return None


def prepare_run_dir(run_dir: Path, cfg: Config) -> bool:
    """Create the run directory with its config, or check that an existing one was made with
    the same config. Returns True when the run already existed (a resume)."""
    run_dir = Path(run_dir)
    _LIVE[str(run_dir.resolve())] = cfg
    diff = check_run_dir(run_dir, cfg)
    if diff is not None:
        if diff:  # a resume on other shards, another cluster, other micro-batches
            _write_config(run_dir / CONFIG_FILE, cfg)
        return True
    run_dir.mkdir(parents=True, exist_ok=True)
    # a new run: a new key, written before the config (a key without a config is a folder
    # that never started: the next try writes a new one)
    write_json(run_dir / RUN_KEY_FILE, {"key": uuid.uuid4().hex})
    _write_config(run_dir / CONFIG_FILE, cfg)
    return False


def run_key(run_dir: Path) -> str:
    """The run's identity (MLflow tag `mars.key`): the random key made with its folder. A folder
    made before run keys existed keeps the one it had then, its absolute path."""
    path = Path(run_dir) / RUN_KEY_FILE
    if path.is_file():
        return str(read_json(path)["key"])
    return str(Path(run_dir).resolve())


def _write_config(saved: Path, cfg: Config) -> None:
    tmp = saved.with_suffix(".tmp")
    tmp.write_text(dump_config(cfg))
    tmp.replace(saved)


_HELD: dict[str, tuple[int, int]] = {}  # run folder -> (fd, depth): re-entrant in one process


def lock_run_dir(run_dir: Path) -> None:
    """Take the run folder's lock for this process, or raise a RunDirError naming the holder.
    Re-entrant (a flow that calls another flow on the same folder); `unlock_run_dir` undoes
    one `lock_run_dir`."""
    run_dir = Path(run_dir)
    key = str(run_dir.resolve())
    if key in _HELD:
        fd, depth = _HELD[key]
        _HELD[key] = (fd, depth + 1)
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise RunDirError(f"run folder {run_dir} is in use by {holder}; wait for that run to "
                          "end or stop it, then run again") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                              "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode(), 0)
    _HELD[key] = (fd, 1)


def unlock_run_dir(run_dir: Path) -> None:
    key = str(Path(run_dir).resolve())
    if key not in _HELD:
        return
    fd, depth = _HELD.pop(key)
    if depth > 1:
        _HELD[key] = (fd, depth - 1)
        return
    os.close(fd)  # closing the descriptor releases the flock


def run_dir_holder(run_dir: Path) -> str | None:
    """Who holds the run folder's lock now ("process 123 on host (since ...)"), or None when
    nobody does (or this process does): read only, nothing created. The lock is tried for an
    instant, shared, so a `mars train` starting in that instant is refused as "in use" and can
    simply be run again."""
    run_dir = Path(run_dir)
    if str(run_dir.resolve()) in _HELD:
        return None
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:  # no lock file: never locked
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    finally:
        os.close(fd)  # closing the descriptor releases a lock just taken
    return None


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"process {info['pid']} on {info['host']} (since {info['since']})"
    except (ValueError, KeyError, OSError):
        return "another process"
