"""The locked install: requirements.lock agrees with pyproject.toml (every dependency of the base
and of the extras `make setup` installs is locked at a version its specifier accepts), every
locked line carries sha256 hashes, torch is the local CPU wheel, and the environment the tests
run in holds exactly the locked versions. An edited pin without `make lock` fails here."""
from __future__ import annotations

import re
import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import REPO

RELOCK = "run `make lock` (and commit the lock files)"


def _makefile_var(name: str) -> str:
    match = re.search(rf"^{name}\s*:=\s*(.*)$", (REPO / "Makefile").read_text(), re.M)
    assert match, f"Makefile defines no {name}"
    return match.group(1).strip()


def parse_lock(text: str) -> dict[str, tuple[Version, list[str]]]:
    """name -> (pinned version, sha256 hashes) of a hashed requirements file; a line that is not
    an exact pin is an AssertionError."""
    locked: dict[str, tuple[Version, list[str]]] = {}
    for line in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()  # comments ("# via ...")
        if not line:
            continue
        head, *opts = line.split()
        req = Requirement(head)
        pins = [s for s in req.specifier if s.operator == "=="]
        assert len(pins) == 1 and len(req.specifier) == 1, f"not an exact pin: {head}"
        name = canonicalize_name(req.name)
        hashes = [o.removeprefix("--hash=sha256:") for o in opts
                  if re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", o)]
        assert len(hashes) == len(opts), f"{head}: unexpected options {opts}"
        locked[name] = (Version(pins[0].version), hashes)
    return locked


def _lock(name: str) -> dict[str, tuple[Version, list[str]]]:
    return parse_lock((REPO / name).read_text())


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def lock_problems(project: dict, extras: list[str], locked: dict) -> list[str]:
    """What of `project`'s dependencies (and of `extras`) the lock lacks or pins outside the
    specifier."""
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    problems = []
    for spec in wanted:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        if name not in locked:
            problems.append(f"{req.name} is not in requirements.lock")
        elif not req.specifier.contains(locked[name][0], prereleases=True):
            problems.append(f"{req.name} is locked at {locked[name][0]}, pyproject.toml asks "
                            f"for {req.specifier}")
    return problems


def test_every_locked_package_is_an_exact_pin_with_hashes():
    for name in ("requirements.lock", "requirements-build.lock", "requirements-model.lock"):
        locked = _lock(name)
        assert locked, name
        unhashed = sorted(n for n, (_, hashes) in locked.items() if not hashes)
        assert not unhashed, f"{name}: no --hash for {unhashed}"


def test_pyproject_dependencies_and_extras_are_locked():
    extras = _makefile_var("LOCK_EXTRAS").split()
    assert {"dev", "deepspeed", "eval"} <= set(extras)
    problems = lock_problems(_pyproject(), extras, _lock("requirements.lock"))
    assert not problems, f"{'; '.join(problems)}: {RELOCK}"


def test_an_edited_pin_without_a_relock_is_found():
    project = _pyproject()
    locked = _lock("requirements.lock")
    edited = {**project, "dependencies": [
        "prefect==3.8.9" if d.startswith("prefect==") else d for d in project["dependencies"]]}
    assert lock_problems(edited, [], locked) == [
        "prefect is locked at 3.8.8, pyproject.toml asks for ==3.8.9"]
    added = {**project, "dependencies": [*project["dependencies"], "rich-argparse>=1"]}
    assert lock_problems(added, [], locked) == ["rich-argparse is not in requirements.lock"]


def test_torch_is_the_local_cpu_wheel():
    locked = _lock("requirements.lock")
    torch = locked["torch"][0]
    assert torch.public == "2.13.0" and torch.local in (None, "cpu"), torch
    cuda = sorted(n for n in locked if n.startswith(("nvidia-", "cuda-")) or n == "triton")
    assert not cuda, f"CUDA packages in the lock: {cuda}"


def test_build_and_model_locks():
    build, main = _lock("requirements-build.lock"), _lock("requirements.lock")
    assert sorted(build) == ["setuptools", "uv"] and build["setuptools"] == main["setuptools"]
    # uv installs the rest (make setup): the version `make lock` resolves with, hash-checked
    assert build["uv"][0] == Version(_makefile_var("UV_VERSION")), RELOCK
    build_system = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]
    for spec in build_system["requires"]:
        req = Requirement(spec)
        assert req.specifier.contains(build[canonicalize_name(req.name)][0]), f"{spec}: {RELOCK}"
    model = Requirement(_makefile_var("MODEL_PKG"))
    pinned = _lock("requirements-model.lock")
    assert list(pinned) == [canonicalize_name(model.name)], RELOCK
    assert model.specifier.contains(pinned[canonicalize_name(model.name)][0]), RELOCK


def test_lock_is_closed_under_its_packages_requirements():
    """Every requirement of a locked package (for the extras asked of it) is locked at a version
    it accepts, read from the installed metadata (the same versions: the next test)."""
    locked = _lock("requirements.lock")
    project = _pyproject()
    todo = [Requirement(s) for s in project["dependencies"]]
    for extra in _makefile_var("LOCK_EXTRAS").split():
        todo += [Requirement(s) for s in project["optional-dependencies"][extra]]
    seen, problems = set(), []
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        key = (name, frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        if name not in locked:
            problems.append(f"{req} is not in requirements.lock")
            continue
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            problems.append(f"{name} is locked but not installed")
            continue
        for spec in requires:
            sub = Requirement(spec)
            envs = [{"extra": e} for e in sorted(req.extras)] or [{"extra": ""}]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                sub_name = canonicalize_name(sub.name)
                if sub_name in locked and not sub.specifier.contains(locked[sub_name][0],
                                                                     prereleases=True):
                    problems.append(f"{name} needs {sub}, the lock has {locked[sub_name][0]}")
                todo.append(sub)
    assert not problems, f"{'; '.join(sorted(problems))}: {RELOCK}"


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-model.lock"])
def test_installed_versions_are_the_locked_ones(lock):
    wrong = []
    for name, (version, _) in _lock(lock).items():
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            wrong.append(f"{name} (not installed)")
            continue
        if installed != version:
            wrong.append(f"{name} {installed} (locked: {version})")
    assert not wrong, f"this environment differs from {lock}: {', '.join(wrong)}; run `make setup`"
