"""How `make test`'s two pytest-xdist workers share the suite (tests/conftest.py): a worker takes a
whole test file, or the whole fault-injection or cluster suite, so module and session fixtures
are built once."""
from __future__ import annotations

from tests.conftest import xdist_scope


def test_a_file_or_a_whole_suite_is_one_workers_unit():
    assert xdist_scope("tests/unit/test_lab.py::test_probe[2-ok]") == "tests/unit/test_lab.py"
    assert xdist_scope("tests/e2e/test_production_path.py::test_a") == \
        xdist_scope("tests/e2e/test_production_path.py::test_b")
    assert xdist_scope("tests/faults/test_kill_points.py::test_k") == "faults"
    assert xdist_scope("tests/faults/test_disk_and_lock.py::test_d") == "faults"
    assert xdist_scope("tests/cluster/test_ray_cluster.py::Suite::test_r") == "cluster"
    assert xdist_scope("tests/flows/test_faults_like.py::test_f") == "tests/flows/test_faults_like.py"


def test_the_workers_take_the_longest_recorded_scopes_first():
    from tests.conftest import longest_first

    scopes = {"tests/unit/a.py": 10, "tests/e2e/b.py": 2, "faults": 5, "tests/unit/new.py": 40}
    seconds = {"tests/unit/a.py": 3.0, "tests/e2e/b.py": 300.0, "faults": 97.0}
    # the new file is estimated at its 40 tests x the recorded 400 s / 17 tests
    assert longest_first(scopes, seconds) == ["tests/unit/new.py", "tests/e2e/b.py", "faults",
                                              "tests/unit/a.py"]
    assert longest_first({"x": 1, "y": 3, "z": 3}, {}) == ["y", "z", "x"]  # no record: counts


def test_a_missing_or_damaged_durations_file_falls_back_to_counts(tmp_path):
    from tests.conftest import DURATIONS, recorded_durations

    assert recorded_durations(tmp_path / "none.json") == {}
    bad = tmp_path / "bad.json"
    for text in ("{not json", "[1, 2]", '{"a": "slow", "b": true, "c": 2}'):
        bad.write_text(text)
        assert recorded_durations(bad) == ({"c": 2.0} if text.startswith('{"a"') else {})
    assert recorded_durations(DURATIONS), "tests/durations.json is missing: `make test-durations`"


def test_a_run_records_each_scopes_seconds(tmp_path):
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    out = tmp_path / "durations.json"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "tests/unit/test_suite_scopes.py::test_a_file_or_a_whole_suite_is_one_workers_unit",
                    "--record-durations", str(out)], cwd=REPO, check=True, capture_output=True)
    assert list(json.loads(out.read_text())) == ["tests/unit/test_suite_scopes.py"]
