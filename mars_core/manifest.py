"""A model folder's manifest: the sha256 and size of every file in it, written with the folder
(the registry cache writes one with each download) and checked before the folder is loaded.
A folder without a manifest loads as before; one with a manifest loads only when every file
matches it and no file was added."""
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


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.name != MANIFEST)


def write_manifest(root: Path) -> Path:
    """Hash every file under `root` into `root/MANIFEST` (written whole: temp file + rename)."""
    root = Path(root)
    files = {rel: {"sha256": sha256(root / rel), "bytes": (root / rel).stat().st_size}
             for rel in _files(root)}
    fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", dir=root)
    with os.fdopen(fd, "w") as f:
        json.dump({"version": 1, "files": files}, f, indent=1, sort_keys=True)
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
        listed = json.loads((root / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ManifestError(f"unreadable manifest {root / MANIFEST} ({type(e).__name__})") from None
    for rel, want in sorted(listed.items()):
        path = root / rel
        if not path.is_file():
            raise ManifestError(f"{path} is missing (listed in its manifest {root / MANIFEST})")
        if path.stat().st_size != want["bytes"] or sha256(path) != want["sha256"]:
            raise ManifestError(f"{path} does not match its manifest (sha256 {want['sha256'][:12]}"
                                f"...): the file was changed since it was written; refusing to "
                                f"load it")
    extra = sorted(set(_files(root)) - set(listed))
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
