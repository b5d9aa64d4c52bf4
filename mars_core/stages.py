"""Stage directories: `runs/<run>/<iter>/<stage>/`, finished by a completion marker.

A stage writes into `<stage>.partial/` and renames it to `<stage>/` when everything is on disk,
so a stage directory exists exactly when the stage finished. A crash leaves at most a partial
folder, which the next attempt throws away: finished work is never redone, unfinished work is
never taken as finished.
"""
from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

MARKER = "_COMPLETE"


def is_done(stage_dir: Path) -> bool:
    return (stage_dir / MARKER).is_file()


@contextmanager
def stage_output(stage_dir: Path):
    """Yield a scratch folder; on success it becomes `stage_dir` atomically."""
    stage_dir = Path(stage_dir)
    partial = stage_dir.with_name(stage_dir.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    yield partial
    (partial / MARKER).write_text("ok\n")
    _fsync_dir(partial)
    if stage_dir.exists():  # an old folder without a marker: not finished work
        shutil.rmtree(stage_dir)
    os.replace(partial, stage_dir)
    _fsync_dir(stage_dir.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, data) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True))


def read_json(path: Path):
    return json.loads(Path(path).read_text())
