"""The benchmark files live outside the repository (`../shared/data/benchmarks`, or the folder
`$MARS_BENCHMARK_DIR` names): a test that reads them is marked `@pytest.mark.benchmarks(...)`
(names; none: every shipped one) and, in a clone without them, is skipped with a reason that
names the missing files, the folder looked in, and where to get each (tests/conftest.py)."""
from __future__ import annotations

import os
from pathlib import Path

DOCS_PAGE = "docs/evaluation/benchmarks.md"


def benchmark_folder() -> Path | str:
    """Where `eval.benchmarks.load` reads the files when no folder is given."""
    from eval.benchmarks import ENV_DIR, SHIPPED_DIR

    chosen = os.environ.get(ENV_DIR) or SHIPPED_DIR
    return chosen if str(chosen).startswith("hf://") else Path(chosen).expanduser()


def missing_benchmarks(names: tuple[str, ...] = ()) -> str | None:
    """None when every named benchmark's file is there (or the source is the hub), else the
    one-line reason to skip: the files, the folder, and where each comes from."""
    from eval.benchmarks import BENCHMARKS, ENV_DIR, PUBLISHERS, SHIPPED

    names = tuple(names) or SHIPPED
    unknown = [n for n in names if BENCHMARKS.get(n, (None,))[0] is None]
    if unknown:
        raise ValueError(f"benchmarks marker: {unknown} name no shipped benchmark file")
    folder = benchmark_folder()
    if isinstance(folder, str):  # hf://: the test reads the publishers' datasets
        return None
    missing = [n for n in names if not (folder / BENCHMARKS[n][0]).is_file()]
    if not missing:
        return None
    files = ", ".join(BENCHMARKS[n][0] for n in missing)
    sources = ", ".join(f"{n}: {PUBLISHERS[n].id}" for n in missing)
    return (f"needs the benchmark file(s) {files}, not in {folder}: put them there or set "
            f"{ENV_DIR} to their folder (their Hugging Face datasets: {sources}; see {DOCS_PAGE})")


def on_files(rows) -> list:
    """Parameters whose first value names a benchmark, each marked as reading that one's file:
    `@pytest.mark.parametrize("bench,ref", on_files(ROWS))`."""
    import pytest

    rows = [r if isinstance(r, tuple) else (r,) for r in rows]
    return [pytest.param(*r, marks=pytest.mark.benchmarks(r[0])) for r in rows]
