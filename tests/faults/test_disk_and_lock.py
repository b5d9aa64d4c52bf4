"""A disk that fills while a checkpoint is written, and two processes on one run folder."""
from __future__ import annotations

import subprocess

import pytest

from mars_core.run.layout import INIT, PREPARE_POLICY, SAVE_CHECKPOINT, TRAIN_STEP, stage_dir
from mars_core.run.commit import is_done, verify_stage
from tests.conftest import REPO
from tests.faults.compare_runs import assert_same_run
from tests.faults.conftest import FULL, run_env, train, train_args, wait_for_flag

pytestmark = pytest.mark.timeout(1200)



@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs (needs root and CAP_SYS_ADMIN; skipped where mounting is not allowed)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)])


@pytest.mark.skipif(not FULL, reason="make test-faults")  # `make test`: the other faults
def test_disk_full_during_a_checkpoint_write(tmp_path, small_disk, tiny_model_dir, prefect_api,
                                             reference_run):
    runs, flag = small_disk / "runs", tmp_path / "flag"
    tracking = f"sqlite:///{tmp_path}/mlflow.db"  # the store stays on a disk with room
    args = train_args(runs, "full", tiny_model_dir)
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=run_env(prefect_api, MLFLOW_TRACKING_URI=tracking,
                                                   MARS_FAULT_WAIT=f"start:{SAVE_CHECKPOINT}:1",
                                                   MARS_FAULT_WAIT_FILE=str(flag)))
    wait_for_flag(flag, proc)
    filler = small_disk / "filler"
    with open(filler, "wb") as f:  # fill the disk to the last block
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass
    flag.unlink()
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("mars: error: no space left on the disk"), last
    assert SAVE_CHECKPOINT in last and "run the same command again" in last
    for previous in (stage_dir(runs / "full", 0, SAVE_CHECKPOINT),
                     stage_dir(runs / "full", 1, TRAIN_STEP)):
        assert is_done(previous) and verify_stage(previous) is None  # intact, every byte
    saving = stage_dir(runs / "full", 1, SAVE_CHECKPOINT)
    assert not is_done(saving)
    assert not saving.with_name(saving.name + ".partial").exists()
    filler.unlink()
    done = train(args, run_env(prefect_api, MLFLOW_TRACKING_URI=tracking))
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_run(reference_run, runs / "full", tracking=tracking)


def test_a_second_process_on_the_same_run_is_refused(tmp_path, tiny_model_dir, prefect_api):
    runs, flag = tmp_path / "runs", tmp_path / "flag"
    # one iteration, no evaluations: the lock is taken before any of them (and the first run's
    # end is all that is checked after the refusal)
    args = train_args(runs, "twice", tiny_model_dir, "--set", "run.iterations=1",
                      "--set", "evaluation.every=0", "--set", "evaluation.at_start=false")
    first = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=run_env(prefect_api,
                                                    MARS_FAULT_WAIT=f"mid:{PREPARE_POLICY}:{INIT}",
                                                    MARS_FAULT_WAIT_FILE=str(flag)))
    wait_for_flag(flag, first)
    second = train(args, run_env(prefect_api))
    assert second.returncode == 2
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith("mars: error: run folder") and "Traceback" not in second.stderr
    assert f"is in use by process {first.pid} on" in last
    prepared = stage_dir(runs / "twice", INIT, PREPARE_POLICY)
    assert prepared.with_name(prepared.name + ".partial").is_dir()  # the first one's work, kept
    flag.unlink()
    out, err = first.communicate(timeout=900)
    assert first.returncode == 0, err[-3000:]
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{runs}/mlflow.db")
    names = [r.info.run_name for r in client.search_runs(
        [e.experiment_id for e in client.search_experiments()])]
    assert names.count("twice") == 1
