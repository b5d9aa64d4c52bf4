"""Bad input at the command line: one line naming the problem, exit code 2, nothing damaged."""
from __future__ import annotations

import pytest

from cli.main import main
from tests.conftest import REPO

SMOKE = str(REPO / "configs/smoke.yaml")


def _run(capsys, *args):
    rc = main(["train", *args])
    err = capsys.readouterr().err.strip()
    return rc, err


@pytest.mark.parametrize("extra,needle", [
    (["--set", "rollout.temprature=0.9"], "unknown config key 'rollout.temprature'"),
    (["--set", "rollout.episodes_per_iteration=many"], "rollout.episodes_per_iteration"),
    (["--set", "model.path=/no/such/model"], "model path does not exist: /no/such/model"),
    (["--config", "/no/such.yaml"], "config file not found"),
    (["--set", "cluster.ray.address=127.0.0.1:1"],
     "cannot reach the Ray cluster at '127.0.0.1:1' (cluster.ray.address)"),
    (["--set", "cluster.ray.address=head-node"], "not host:port"),
])
def test_bad_input_is_one_line(tmp_path, capsys, extra, needle):
    args = ["--config", SMOKE, "--runs-dir", str(tmp_path)]
    if extra[0] == "--config":
        args = [*extra, "--runs-dir", str(tmp_path)]
    else:
        args += extra
    rc, err = _run(capsys, *args)
    assert rc == 2 and needle in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # nothing written


def test_run_dir_from_another_config_is_refused_untouched(tmp_path, capsys):
    run = tmp_path / "smoke"
    from mars_core.config import load_config
    from tasks.paths import prepare_run_dir

    prepare_run_dir(run, load_config(SMOKE))
    (run / "keep.txt").write_text("precious")
    before = (run / "config.yaml").read_text()
    rc, err = _run(capsys, "--config", SMOKE, "--runs-dir", str(tmp_path), "--set", "run.seed=7")
    assert rc == 2 and "different config (differs in: run.seed)" in err
    assert (run / "config.yaml").read_text() == before and (run / "keep.txt").exists()


def test_folder_that_is_not_a_run_is_refused(tmp_path, capsys):
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "notes.txt").write_text("mine")
    rc, err = _run(capsys, "--config", SMOKE, "--runs-dir", str(tmp_path))
    assert rc == 2 and "is not a run directory" in err


def test_compare_refused_on_its_third_preset_leaves_no_run_folder(tmp_path, capsys):
    presets = tmp_path / "presets"
    presets.mkdir()
    for name in ("first", "second"):
        (presets / f"{name}.yaml").write_text(f"extends: {SMOKE}\n")
    (presets / "third.yaml").write_text(f"extends: {SMOKE}\nrollout:\n  temprature: 0.9\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    rc = main(["compare", "--presets", ",".join(str(presets / f"{n}.yaml")
                                                for n in ("first", "second", "third")),
               "--runs-dir", str(runs)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "unknown config key 'rollout.temprature'" in err
    assert len(err.splitlines()) == 1
    assert not any(runs.iterdir())  # the checks read; the flows write

