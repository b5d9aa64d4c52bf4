"""Where a run keeps its files: `runs/<run>/...`. One place, so tasks and flows agree.

Also who may use a run folder: run names are plain (letters, digits, `.`, `_`, `-`), and one
process at a time holds a run folder's lock (`.lock`, an advisory `flock`: the kernel drops it
when its holder dies, so a lock left by a killed process is simply taken over).
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import time
from pathlib import Path

from mars_core.config import Config, ConfigError, config_diff, dump_config, load_config

CONFIG_FILE = "config.yaml"
LOCK_FILE = ".lock"
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class RunDirError(Exception):
    """A run directory that cannot be used as asked (one-line message)."""


def check_run_name(name: str, what: str = "--run-name") -> str:
    """`name` when it is a plain folder name (letters, digits, `.`, `_`, `-`, starting with a
    letter or digit), else a RunDirError: `../x`, `a/b` or `~x` never leave the runs folder."""
    if not isinstance(name, str) or not RUN_NAME.match(name):
        raise RunDirError(f"{what} {name!r}: use letters, digits, '.', '_' and '-' only (starting "
                          "with a letter or digit, at most 200 characters)")
    return name


def run_dir_for(runs_dir: str | Path, name: str, what: str = "--run-name") -> Path:
    return Path(runs_dir) / check_run_name(name, what)


def iter_dir(run_dir: Path, k: int) -> Path:
    return Path(run_dir) / f"iter_{k:04d}"


def stage_dir(run_dir: Path, k: int | str, stage: str) -> Path:
    base = iter_dir(run_dir, k) if isinstance(k, int) else Path(run_dir) / k
    return base / stage


def checkpoint_dir(run_dir: Path, k: int) -> Path:
    """The published checkpoint of iteration k (weights, tokenizer, trainer state)."""
    return iter_dir(run_dir, k) / "save_checkpoint"


# The stages of a run in the order they run (folder names): `init/`, each `iter_k/`, `final/`.
INIT_STAGES = ("prepare_policy", "evaluate")
ITERATION_STAGES = ("generate_rollouts", "build_players", "filter_steps", "assign_rewards",
                    "bank_episodes", "build_batch", "compute_advantages", "replays", "train_step",
                    "save_checkpoint", "evaluate")
FINAL_STAGES = ("model", "strength")


def finished_stages(run_dir: Path) -> list[Path]:
    """The run's finished stage folders, in the order they ran."""
    from mars_core.stages import is_done

    run_dir = Path(run_dir)
    groups = [(run_dir / "init", INIT_STAGES)]
    groups += [(d, ITERATION_STAGES) for d in sorted(run_dir.glob("iter_[0-9][0-9][0-9][0-9]"))]
    groups.append((run_dir / "final", FINAL_STAGES))
    return [base / s for base, names in groups for s in names if is_done(base / s)]


def is_heavy(name: str) -> bool:
    """Weights and optimizer state (DeepSpeed's `deepspeed/` folder included): what pruning
    removes from old checkpoints. `name`: a file name or a path relative to the checkpoint."""
    from mars_core.checkpoint import DEEPSPEED_STATE, TRAINER_STATE

    first = Path(name).parts[0]
    return first.endswith(".safetensors") or first in (TRAINER_STATE, DEEPSPEED_STATE)


# The configs this process was given, by run folder: they hold the real secrets, which
# config.yaml does not (mars_core.redact). Tasks in this process read these.
_LIVE: dict[str, Config] = {}


def read_config(run_dir: Path) -> Config:
    live = _LIVE.get(str(Path(run_dir).resolve()))
    return live if live is not None else load_config(Path(run_dir) / CONFIG_FILE)


def prepare_run_dir(run_dir: Path, cfg: Config) -> bool:
    """Create the run directory with its config, or check that an existing one was made with
    the same config. Returns True when the run already existed (a resume)."""
    run_dir = Path(run_dir)
    saved = run_dir / CONFIG_FILE
    _LIVE[str(run_dir.resolve())] = cfg
    if saved.is_file():
        try:
            old = load_config(saved)
        except ConfigError as e:
            raise RunDirError(f"run directory {run_dir} has an unreadable config: {e}") from None
        diff = config_diff(old, cfg)
        if any(not k.startswith("cluster.") for k in diff):
            raise RunDirError(f"run directory {run_dir} was created with a different config "
                              f"(differs in: {', '.join(diff[:5])}); choose another --run-name")
        if diff:  # only where the games run (shards, the Ray cluster): the results are the same
            _write_config(saved, cfg)
        return True
    if run_dir.exists() and any(p.name != LOCK_FILE for p in run_dir.iterdir()):
        raise RunDirError(f"{run_dir} exists and is not a run directory (no {CONFIG_FILE})")
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_config(saved, cfg)
    return False


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


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"process {info['pid']} on {info['host']} (since {info['since']})"
    except (ValueError, KeyError, OSError):
        return "another process"
