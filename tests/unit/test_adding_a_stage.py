"""docs/adding-a-stage.md, followed: in a copy of the repository, the toy stage `turn_counts` is
added with the page's code blocks, verbatim (the record in mars_core/run/layout.py, the body in
tasks/postprocess.py, its test); only those three files differ from the repository, and after
docs/gen_reference.py only the generated DAG pages besides. Then, in the copy, the DAG scans
accept its read, the training flow's loop runs it in its place, and its own test passes."""
from __future__ import annotations

import filecmp
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PAGE = REPO / "docs" / "adding-a-stage.md"
LAYOUT, BODY_MODULE = "mars_core/run/layout.py", "tasks/postprocess.py"
TOY_TEST = "tests/unit/test_turn_counts.py"
COPIED = ("mars_core", "tasks", "flows", "cli", "eval", "docs", "configs", "README.md",
          "mkdocs.yml", "prefect.yaml", "pyproject.toml", "tests/__init__.py", "tests/conftest.py",
          "tests/benchmark_files.py",
          "tests/unit/__init__.py", "tests/unit/test_dag.py", "tests/unit/test_stage.py")
GENERATED = {"README.md", "docs/dag.md", "docs/index.md", "docs/architecture.md"}


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def _copy(to: Path) -> None:
    skip = shutil.ignore_patterns("__pycache__", "assets", "img", "screenshots*")
    for name in COPIED:
        src, dst = REPO / name, to / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=skip)
        else:
            shutil.copy2(src, dst)


def _follow_the_page(root: Path) -> None:
    """The page's five code blocks: the record (its constants, its place in ITERATION_STAGES,
    its STAGE_INPUTS line), the body, the test."""
    constants, order, inputs, body, test = _blocks()
    layout = root / LAYOUT
    text = layout.read_text()
    first = next(line for line in text.splitlines() if line.startswith("ITERATION_STAGES = ("))
    assert order.strip() == first.replace("BANK_EPISODES,", "TURN_COUNTS,"), \
        "the page's ITERATION_STAGES line is not the layout's with the toy stage in it"
    text = text.replace(first, order.rstrip("\n") + "\n" + " " * 20 + "BANK_EPISODES,")
    text = text.replace("\nINIT, FINAL = ", "\n" + constants + "INIT, FINAL = ", 1)
    text = text.replace("\nSTAGE_INPUTS = {\n", "\nSTAGE_INPUTS = {\n" + inputs, 1)
    layout.write_text(text)
    module = root / BODY_MODULE
    module.write_text(module.read_text() + "\n\n" + body)
    (root / TOY_TEST).write_text(test)


def _differing(root: Path) -> set[str]:
    files = {p.relative_to(root).as_posix() for p in root.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    return {f for f in files if not (REPO / f).is_file()
            or not filecmp.cmp(root / f, REPO / f, shallow=False)}


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "OMP_WAIT_POLICY": "PASSIVE",
           "HOME": str(root)}
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=900)


def test_the_page_names_the_three_files_and_says_nothing_else_is_edited():
    text = PAGE.read_text()
    for where in (LAYOUT, BODY_MODULE, "tests/unit/test_<stage>.py", "docs/gen_reference.py",
                  "Nothing else is edited", "@iteration_stage"):
        assert where in text, where
    assert len(_blocks()) == 5


@pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out (it runs long)
def test_adding_the_toy_stage_the_pages_way(tmp_path):
    root = tmp_path / "repo"
    _copy(root)
    _follow_the_page(root)
    assert _differing(root) == {LAYOUT, BODY_MODULE, TOY_TEST}
    done = _run(root, "docs/gen_reference.py")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _differing(root) == {LAYOUT, BODY_MODULE, TOY_TEST} | GENERATED
    assert '"turn_counts"' in (root / "README.md").read_text()
    assert "iter_assign_rewards --> iter_turn_counts" in (root / "docs" / "dag.md").read_text()
    done = _run(root, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_dag.py",
                "tests/unit/test_stage.py", TOY_TEST)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\b1[0-9] passed", done.stdout), done.stdout[-500:]
