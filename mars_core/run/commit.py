"""Stage directories: `runs/<run>/<iter>/<stage>/`, finished by a completion marker.

A stage writes into `<stage>.partial/` and renames it to `<stage>/` when everything is on disk,
so a stage directory exists exactly when the stage finished. A crash leaves at most a partial
folder, which the next attempt throws away: finished work is never redone, unfinished work is
never taken as finished.

Every file is fsynced before the marker, and the marker is a manifest: each file's size and
SHA-256. `verify_stage` checks a finished stage against it, so a file damaged after the stage
finished (a bad disk, a hand edit, a copy cut short) is found instead of being trained on.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

MARKER = "_COMPLETE"
PUBLISHED = "_PUBLISHED.json"  # what of a finished stage reached the tracking server (not hashed)
_UNHASHED = (MARKER, PUBLISHED)


class StageError(Exception):
    """A stage that cannot be written or trusted (one-line message)."""


def is_done(stage_dir: Path) -> bool:
    return (stage_dir / MARKER).is_file()


def fault_point(name: str) -> None:
    """Crash-test hooks, unset in normal use (two environment lookups). MARS_FAULT_KILL=<name>:
    the process kills itself here with SIGKILL, exactly like `kill -9` at this point.
    MARS_FAULT_WAIT=<name>: it writes the file MARS_FAULT_WAIT_FILE and waits here until the
    file is removed (a test breaks something meanwhile: a server, the disk)."""
    if os.environ.get("MARS_FAULT_KILL") == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("MARS_FAULT_WAIT") == name:
        flag = Path(os.environ["MARS_FAULT_WAIT_FILE"])
        flag.write_text(name)
        while flag.exists():
            time.sleep(0.05)


@contextmanager
def stage_output(stage_dir: Path, fault: str | None = None):
    """Yield a scratch folder; on success it becomes `stage_dir` atomically, its files fsynced
    and listed (size, SHA-256) in the marker. A full disk is one StageError naming the stage;
    the previous stages' files are untouched."""
    stage_dir = Path(stage_dir)
    partial = stage_dir.with_name(stage_dir.name + ".partial")
    try:
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        if fault:
            fault_point(f"start:{fault}")
        yield partial
        if fault:
            fault_point(f"mid:{fault}")
        manifest = {rel: meta for rel, meta in _files(partial)}
        _write_synced(partial / MARKER, json.dumps({"files": manifest}, indent=1, sort_keys=True))
        _fsync_dir(partial)
        if stage_dir.exists():  # an old folder without a marker: not finished work
            shutil.rmtree(stage_dir)
        os.replace(partial, stage_dir)
        _fsync_dir(stage_dir.parent)
    except Exception as e:
        if not _disk_full(e, stage_dir):
            raise
        shutil.rmtree(partial, ignore_errors=True)
        raise StageError(f"no space left on the disk of {_device_of(stage_dir)} while writing "
                         f"{stage_dir}; earlier stages are intact: free space and run the same "
                         "command again to resume") from None


FULL_BELOW_BYTES = 16 * 2**20


def _disk_full(e: BaseException, where: Path) -> bool:
    """ENOSPC/EDQUOT, also when a library rewraps it (safetensors, pyarrow) or loses it
    (torch.save says only "unexpected pos"): a write that fails with less than 16 MiB free
    on the stage's disk is taken for a full disk."""
    if shutil.disk_usage(_device_of(where)).free < FULL_BELOW_BYTES:
        return True
    while e is not None:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(e) or "Disk quota exceeded" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def _device_of(path: Path) -> str:
    path = Path(path).resolve()
    while not path.exists():
        path = path.parent
    return str(path)


def _files(root: Path):
    """(relative path, {size, sha256}) of every file under `root`, each fsynced."""
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if rel in _UNHASHED:
            continue
        digest, size = hashlib.sha256(), 0
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
                size += len(block)
            os.fsync(f.fileno())
        yield rel, {"size": size, "sha256": digest.hexdigest()}
    for folder in sorted(p for p in root.rglob("*") if p.is_dir()):
        _fsync_dir(folder)


def manifest(stage_dir: Path) -> dict[str, dict]:
    """The files a finished stage recorded ({} for a marker of the old plain kind)."""
    try:
        return json.loads((Path(stage_dir) / MARKER).read_text()).get("files", {})
    except (ValueError, AttributeError):
        return {}


def verify_stage(stage_dir: Path, hashes: bool = True,
                 may_be_gone: Callable[[str], bool] | None = None) -> str | None:
    """None when every file the marker lists is there with its size (and SHA-256 when
    `hashes`), else a one-line description of the first damaged file. A file for whose
    relative path `may_be_gone` is true may be missing (weights pruned on purpose)."""
    stage_dir = Path(stage_dir)
    for rel, meta in manifest(stage_dir).items():
        path = stage_dir / rel
        if not path.is_file():
            if may_be_gone is not None and may_be_gone(rel):
                continue
            return f"{path} is missing"
        if path.stat().st_size != meta["size"]:
            return f"{path} has {path.stat().st_size} bytes, {meta['size']} were written"
        if hashes:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            if digest.hexdigest() != meta["sha256"]:
                return f"{path} does not match the SHA-256 recorded when it was written"
    return None


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, data) -> None:
    """Write JSON atomically: a temporary file beside it, fsynced, renamed over `path`, so a
    crash leaves the old file or the new one, never half of one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        _write_synced(tmp, json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def read_json(path: Path):
    return json.loads(Path(path).read_text())
