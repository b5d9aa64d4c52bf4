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
