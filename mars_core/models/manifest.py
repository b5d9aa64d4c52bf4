"""A model folder's manifest: the sha256 and size of every file in it, written with the folder
(the registry cache with each download, training with each checkpoint) and checked before the
folder is loaded. A folder without a manifest loads as before; one with a manifest loads only
when every file matches it and no file was added.

Two kinds of exception, recorded in the manifest itself: files listed by size only (a
checkpoint's optimizer state, which no model load reads), and top-level names it does not cover
at all (a stage's bookkeeping, written after it: the completion marker, the metrics)."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

MANIFEST = "mars_manifest.json"
_CHUNK = 1 << 20


class ManifestError(Exception):
    """A file that does not match its folder's manifest (one-line message naming the file)."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _uncovered(rel: str, unlisted: tuple[str, ...]) -> bool:
    """A manifest, a top-level name in `unlisted`, or the temporary file an atomic write of
    one of them leaves for a moment (`.NAME.<suffix>`)."""
    if rel.rsplit("/", 1)[-1] == MANIFEST:
        return True
    return "/" not in rel and any(rel == name or rel.startswith(f".{name}.")
                                  for name in (MANIFEST, *unlisted))


def _files(root: Path, unlisted: tuple[str, ...] = ()) -> list[str]:
    rels = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return sorted(rel for rel in rels if not _uncovered(rel, unlisted))


def write_manifest(root: Path, size_only: tuple[str, ...] = (),
                   unlisted: tuple[str, ...] = ()) -> Path:
    """Hash every file under `root` into `root/MANIFEST` (written whole: temp file + rename).
    Files under the top-level names `size_only` are listed by size only; the top-level names
    `unlisted` are not covered (files added there later do not count as added)."""
    root = Path(root)
    files = {}
    for rel in _files(root, tuple(unlisted)):
        files[rel] = {"bytes": (root / rel).stat().st_size}
        if rel.split("/", 1)[0] not in size_only:
            files[rel]["sha256"] = sha256(root / rel)
    fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", dir=root)
    with os.fdopen(fd, "w") as f:
        json.dump({"version": 1, "files": files, **({"unlisted": sorted(unlisted)} if unlisted
                                                     else {})}, f, indent=1, sort_keys=True)
    os.replace(tmp, root / MANIFEST)
    return root / MANIFEST


def manifest_root(folder: Path) -> Path | None:
    """The folder whose manifest covers `folder`: itself, or its parent (a registry download's
    `model/` subfolder), None when neither has one."""
    folder = Path(folder)
    for root in (folder, folder.parent):
        if (root / MANIFEST).is_file():
            return root
    return None


def verify_manifest(root: Path) -> None:
    """Every file listed in `root/MANIFEST` is there with its size and sha256, and no other file
    is; else ManifestError naming the first file that differs."""
    root = Path(root)
    try:
        data = json.loads((root / MANIFEST).read_text())
        listed, unlisted = data["files"], tuple(data.get("unlisted", ()))
        for want in listed.values():
            int(want["bytes"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ManifestError(f"unreadable manifest {root / MANIFEST} ({type(e).__name__})") from None
    for rel, want in sorted(listed.items()):
        path = root / rel
        if not path.is_file():
            raise ManifestError(f"{path} is missing (listed in its manifest {root / MANIFEST})")
        if path.stat().st_size != want["bytes"]:
            raise ManifestError(f"{path} does not match its manifest ({path.stat().st_size} "
                                f"bytes, {want['bytes']} when written): the file was changed "
                                "since it was written; refusing to load it")
        if "sha256" in want and sha256(path) != want["sha256"]:
            raise ManifestError(f"{path} does not match its manifest (sha256 {want['sha256'][:12]}"
                                f"...): the file was changed since it was written; refusing to "
                                f"load it")
    extra = sorted(set(_files(root, unlisted)) - set(listed))
    if extra:
        raise ManifestError(f"{root / extra[0]} is not in its folder's manifest ({root / MANIFEST}"
                            "): a file was added since the folder was written; refusing to load it")


def verify_folder(folder: Path) -> bool:
    """Check `folder` against the manifest that covers it (`manifest_root`); False when there is
    none, True when it matches; ManifestError otherwise."""
    root = manifest_root(folder)
    if root is None:
        return False
    verify_manifest(root)
    return True
