"""bench/gpu_check.py's packages and carry (issue 47): what the GPU machine lacks and how it
gets there. The packages: the carried wheels that this interpreter can use and lacks, unpacked
onto sys.path; the polars placeholder; `MARS_GPU_CHECK_HIDE` and `MARS_GPU_CHECK_STALL` (tests).
The carry (`--build-carry DIR`, `make gpu-carry`): the wheels and the embedded tokenizer, checked
with the working tree against the device call's 64 MiB. A plain sibling of bench/gpu_check.py
(it runs where only torch, transformers and a few more are installed), imported from there."""
from __future__ import annotations

import datetime as dt
import importlib.abc
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LIMIT_BYTES = 64 * 2**20  # what one device call may carry: working tree + carried paths
DEFAULT_CARRY = REPO / ".gpu-carry"
# what the GPU image lacks and the check needs, as locked in requirements.lock
# (typing-extensions: pydantic-core 2.50 needs >= 4.16, newer than the image may hold; a
# carried wheel is used only where the installed version is older or missing)
CARRY_WHEELS = ("pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
                "typing-inspection==0.4.5", "typing-extensions==4.16.0", "hjson==3.1.0")
# DeepSpeed publishes only a source archive; its wheel is pure Python (ops compile at run time
# where used; the torch backend's AdamW needs none), built here: 2.2 MB, so it travels too
CARRY_BUILT = ("deepspeed==0.19.8",)
CARRY_PYTHON = "3.12"  # the GPU image's python3 (KINDS.md: 3.12.3)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "special_tokens_map.json")


class Missing(Exception):
    """A step cannot run: a package (or the model) is missing. One line, no traceback."""


# --------------------------------------------------------------------------- packages
class _Hide(importlib.abc.MetaPathFinder):
    """MARS_GPU_CHECK_HIDE: these top-level packages import as if absent."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


HIDDEN = [n.strip() for n in os.environ.get("MARS_GPU_CHECK_HIDE", "").split(",") if n.strip()]
if HIDDEN:
    sys.meta_path.insert(0, _Hide(HIDDEN))
# MARS_GPU_CHECK_STALL=matmul: that step hangs (tests of --deadline)
STALL = {n.strip() for n in os.environ.get("MARS_GPU_CHECK_STALL", "").split(",") if n.strip()}


def have(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ModuleNotFoundError, ValueError):
        return False


def need(*names: str) -> None:
    missing = [n for n in names if not have(n)]
    if missing:
        raise Missing(f"missing package{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")


PLACEHOLDER = '''"""A placeholder for polars, put on the path by bench/gpu_check.py where polars is not
installed (the GPU image): mars_core.types builds its Parquet schemas at import time, and the
check reads and writes no Parquet. Any real use fails loudly."""
__mars_placeholder__ = True


class _Any:
    def __init__(self, name):
        self._name = name

    def __call__(self, *a, **k):
        return _Any(self._name + "()")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Any(self._name + "." + attr)

    def __repr__(self):
        return "<polars placeholder " + self._name + ">"

    def __getitem__(self, key):
        return _Any(self._name + "[]")

    def __or__(self, other):
        return self


def __getattr__(attr):
    if attr in ("read_parquet", "scan_parquet", "DataFrame", "LazyFrame", "concat", "from_dicts"):
        def _refuse(*a, **k):
            raise ModuleNotFoundError("No module named 'polars' (a placeholder stands in: "
                                      "the GPU image has no polars)", name="polars")
        return _refuse
    if attr.startswith("__"):
        raise AttributeError(attr)
    return _Any("polars." + attr)
'''


def _wheel_fits(path: Path) -> bool:
    """Whether this interpreter can use a wheel (its tags against this Python's)."""
    try:
        from packaging.tags import sys_tags
        from packaging.utils import parse_wheel_filename
    except ImportError:  # no packaging: accept pure-Python wheels only
        return path.name.endswith("-none-any.whl")
    _, _, _, tags = parse_wheel_filename(path.name)
    return bool(set(tags) & set(sys_tags()))


def _wheel_version(wheel: Path):
    """(distribution name, version) of a wheel file; version None without `packaging`."""
    try:
        from packaging.utils import parse_wheel_filename
    except ImportError:
        return wheel.name.split("-")[0], None
    name, version, _, _ = parse_wheel_filename(wheel.name)
    return str(name), version


def _installed_version(name: str):
    """The installed version of a distribution (a `packaging` Version), None if absent."""
    from importlib import metadata

    try:
        raw = metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    try:
        from packaging.version import Version

        return Version(raw)
    except Exception:  # noqa: BLE001  (no packaging, or an odd version: treat as current)
        return raw


def _top_levels(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        tl = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        if tl:
            return [t for t in z.read(tl[0]).decode().split() if t]
    return sorted({n.split("/")[0].split(".")[0] for n in names
                   if not n.split("/")[0].endswith((".dist-info", ".data"))})


def setup_packages(carry: Path | None, site: Path) -> dict:
    """Unpack the carried wheels this interpreter lacks and can use onto sys.path (`site`),
    and put the polars placeholder there if polars is missing. Returns what was done."""
    notes: dict = {"carried": [], "unused": [], "placeholders": []}
    wheels = sorted((carry / "wheels").glob("*.whl")) if carry and carry.is_dir() else []
    for wheel in wheels:
        tops = _top_levels(wheel)
        if any(t in HIDDEN for t in tops):
            notes["unused"].append(f"{wheel.name} (hidden: MARS_GPU_CHECK_HIDE)")
            continue
        name, version = _wheel_version(wheel)
        installed = _installed_version(name)
        if installed is not None and (version is None or installed >= version):
            notes["unused"].append(f"{wheel.name} (installed: {installed})")
            continue
        if not _wheel_fits(wheel):
            notes["unused"].append(f"{wheel.name} (not for this Python)")
            continue
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
        notes["carried"].append(wheel.name + (f" (over {installed})" if installed else ""))
    if not have("polars"):
        (site / "polars").mkdir(parents=True, exist_ok=True)
        (site / "polars" / "__init__.py").write_text(PLACEHOLDER)
        notes["placeholders"].append("polars")
        if "polars" in HIDDEN:  # the placeholder stands in for the hidden package
            sys.meta_path[0].names.discard("polars")
    if wheels or notes["placeholders"]:
        sys.path.insert(0, str(site))
        importlib.invalidate_caches()
    return notes


def real_polars() -> bool:
    if not have("polars"):
        return False
    import polars

    return not getattr(polars, "__mars_placeholder__", False)


# --------------------------------------------------------------------------- carry
def tree_bytes(root: Path = REPO) -> int:
    """What a device call sends of the checkout: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, check=True).stdout.decode()
    total = 0
    for name in {n for n in out.split("\0") if n}:
        p = root / name
        if p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def carry_size(carry: Path, limit: int = LIMIT_BYTES, tree: int | None = None) -> dict:
    """The carry folder and the working tree against the call's limit."""
    tree = tree_bytes() if tree is None else tree
    carried = folder_bytes(carry) if carry.is_dir() else 0
    return {"carry_bytes": carried, "tree_bytes": tree, "total_bytes": tree + carried,
            "limit_bytes": limit, "fits": tree + carried <= limit}


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def build_carry(carry: Path, python: str = CARRY_PYTHON) -> int:
    """`make gpu-carry`: the wheels the GPU image lacks (for its Python) and the embedded
    model's tokenizer, then the size check. Exit 1 when over the limit."""
    wheels = carry / "wheels"
    if wheels.exists():
        shutil.rmtree(wheels)
    wheels.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--implementation", "cp", "-d", str(wheels)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run(cmd + list(CARRY_WHEELS), check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), *CARRY_BUILT], check=True)
    tok = carry / "tokenizer"
    if tok.exists():
        shutil.rmtree(tok)
    tok.mkdir()
    try:
        from mars_core.models.weights import resolve_model

        src = Path(resolve_model("embedded"))
        for name in TOKENIZER_FILES:
            if (src / name).exists():
                shutil.copy2(src / name, tok / name)
    except Exception as e:  # noqa: BLE001  (the wheels still help; tests/gpu then errors there)
        print(f"gpu-carry: no tokenizer ({type(e).__name__}: {e})")
    size = carry_size(carry)
    manifest = {"python": python, "wheels": sorted(p.name for p in wheels.glob("*.whl")),
                "tokenizer": sorted(p.name for p in tok.iterdir()), **size,
                "built": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    (carry / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    verdict = "fits" if size["fits"] else "DOES NOT FIT"
    print(f"gpu-carry: {carry} {mib(size['carry_bytes'])} + working tree "
          f"{mib(size['tree_bytes'])} = {mib(size['total_bytes'])} of {mib(size['limit_bytes'])}: "
          f"{verdict}")
    return 0 if size["fits"] else 1
