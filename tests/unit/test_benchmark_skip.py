"""A clone without the benchmark files (they live outside the repository) skips the tests that
read them, with a reason naming each missing file, the folder looked in and where to get it;
it does not fail them."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from eval.benchmarks import ENV_DIR, SHIPPED
from tests.benchmark_files import DOCS_PAGE, missing_benchmarks
from tests.conftest import REPO


def test_the_reason_names_the_files_the_folder_and_the_source(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    reason = missing_benchmarks(("gsm8k", "aqua"))
    assert "gsm8k.jsonl, aqua.jsonl" in reason and str(tmp_path) in reason
    assert "openai/gsm8k" in reason and "deepmind/aqua_rat" in reason and ENV_DIR in reason
    assert DOCS_PAGE in reason and (REPO / DOCS_PAGE).is_file()  # where to get each, in full
    assert all(f"{n}.jsonl" in missing_benchmarks() for n in SHIPPED)  # none named: all
    (tmp_path / "gsm8k.jsonl").write_text("{}\n")
    assert "gsm8k.jsonl" not in missing_benchmarks(("gsm8k", "aqua"))
    assert missing_benchmarks(("gsm8k",)) is None
    monkeypatch.setenv(ENV_DIR, "hf://")  # the publishers' datasets: the test itself decides
    assert missing_benchmarks(("aqua",)) is None
    with pytest.raises(ValueError, match="gpqa_diamond"):  # gated: never a shipped file
        missing_benchmarks(("gpqa_diamond",))


def test_a_clone_without_the_files_skips_their_tests_with_the_reason(tmp_path):
    """pytest in a subprocess with the benchmark folder empty: the tests that read the files
    are skipped (with the reason), the others still run and pass."""
    env = {**os.environ, ENV_DIR: str(tmp_path)}
    chosen = ["tests/unit/test_benchmarks.py::test_limit_spreads_evenly_and_is_stable",
              "tests/unit/test_benchmarks.py::test_bad_input_is_one_line",
              "tests/unit/test_graders.py::test_every_math500_reference_grades_itself_boxed"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           *chosen], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert re.search(r"\b1 passed, 2 skipped\b", out), out[-3000:]
    assert "mmlu_stem.jsonl" in out and "math500.jsonl" in out and str(tmp_path) in out
