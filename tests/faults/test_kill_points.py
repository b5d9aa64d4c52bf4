"""kill -9 at every stage point, then the same command again, until the run finishes: it ends
equal to an uninterrupted run. Each kill point is a real SIGKILL of the `mars train` process
(MARS_FAULT_KILL=<point>, mars_core.run.commit.fault_point):

- `start:<stage>:<k>`: the stage's scratch folder exists, nothing written;
- `mid:<stage>:<k>`: every file written, the completion marker not yet;
- `end:<stage>:<k>`: the marker written, nothing published to MLflow yet;
- and inside the MLflow bookkeeping: the run created but not noted, the model's files uploaded
  but no version, a version created but no alias.

One chain of runs: each run is killed at the next point, so the points are survived in the
order the flow reaches them. `make test` runs a slice; `make test-faults` all of them."""
from __future__ import annotations

import pytest

from mars_core.run.layout import (COMPUTE_ADVANTAGES, EVALUATE, FINAL, FINAL_MODEL,
                                  GENERATE_ROLLOUTS, INIT, INIT_STAGES, ITERATION_STAGES,
                                  PREPARE_POLICY, SAVE_CHECKPOINT, STRENGTH, TRAIN_STEP,
                                  checkpoint_dir, iter_name)
from tests.faults.compare_runs import assert_same_run
from tests.faults.conftest import FULL, OVERLAP, run_env, train, train_args

pytestmark = pytest.mark.timeout(7200 if FULL else 1500)

STAGES_INIT = INIT_STAGES  # prepare_policy, evaluate
STAGES_ITER = ITERATION_STAGES  # generate_rollouts ... save_checkpoint, evaluate
WHEN = ("start", "mid", "end")


def every_point() -> list[str]:
    points = [f"mid:ensure_run:{INIT}"]
    points += [f"{w}:{s}:{INIT}" for s in STAGES_INIT for w in WHEN]
    points += [f"{w}:{s}:0" for s in STAGES_ITER for w in WHEN]
    points += [f"mid:{TRAIN_STEP}:1", f"end:{SAVE_CHECKPOINT}:1", f"mid:{EVALUATE}:1"]
    points += [f"{w}:{FINAL_MODEL}:{FINAL}" for w in WHEN]
    points += [f"mid:register_model:{FINAL}", f"end:register_model:{FINAL}"]
    points += [f"{w}:{STRENGTH}:{FINAL}" for w in WHEN]
    return points


# `make test`'s slice: one point in each part of the run (its MLflow run, the warm-up, an
# iteration's stages, its checkpoint, the registry)
SLICE = [f"mid:ensure_run:{INIT}", f"mid:{PREPARE_POLICY}:{INIT}", f"start:{COMPUTE_ADVANTAGES}:0",
         f"end:{SAVE_CHECKPOINT}:0", f"mid:register_model:{FINAL}"]


def test_kill_at_every_point_then_resume(tmp_path, tiny_model_dir, prefect_api, reference_run):
    runs = tmp_path / "runs"
    args = train_args(runs, "crashy", tiny_model_dir)
    points = every_point() if FULL else SLICE
    for point in points:
        killed = train(args, run_env(prefect_api, MARS_FAULT_KILL=point))
        assert killed.returncode == -9, (f"kill point {point} was not reached (exit "
                                         f"{killed.returncode}): {killed.stderr[-2000:]}")
    done = train(args, run_env(prefect_api))
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"kill points survived: {len(points)}")
    assert_same_run(reference_run, runs / "crashy")
    # the same command once more: nothing to do, nothing logged twice
    again = train(args, run_env(prefect_api))
    assert again.returncode == 0, again.stderr[-2000:]
    assert_same_run(reference_run, runs / "crashy")


# with `rollout.overlap`, iteration 1's games are in flight in a thread when iteration 0's
# update starts and have ended (committed) before its checkpoint: points on the flow's thread
# (a point inside the games' thread is reached before or after the update's, by chance)
OVERLAP_POINTS = [f"start:{TRAIN_STEP}:0", f"mid:{TRAIN_STEP}:0", f"end:{SAVE_CHECKPOINT}:0"]
OVERLAP_SLICE = [f"start:{TRAIN_STEP}:0"]


@pytest.mark.skipif(not FULL, reason="make test-faults")  # `make test`: the overlap (tests/flows)
def test_kill_while_games_are_played_ahead_then_resume(tmp_path, tiny_model_dir, prefect_api,
                                                       overlap_reference_run):
    runs = tmp_path / "runs"
    args = train_args(runs, "crashy-overlap", tiny_model_dir, *OVERLAP)
    for point in OVERLAP_POINTS if FULL else OVERLAP_SLICE:
        killed = train(args, run_env(prefect_api, MARS_FAULT_KILL=point))
        assert killed.returncode == -9, (f"kill point {point} was not reached (exit "
                                         f"{killed.returncode}): {killed.stderr[-2000:]}")
    done = train(args, run_env(prefect_api))
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_run(overlap_reference_run, runs / "crashy-overlap")


@pytest.mark.skipif(not FULL, reason="make test-faults")
def test_a_corrupt_checkpoint_is_found_and_redone_on_resume(tmp_path, tiny_model_dir, prefect_api,
                                                            reference_run):
    runs = tmp_path / "runs"
    args = train_args(runs, "rot", tiny_model_dir)
    killed = train(args, run_env(prefect_api, MARS_FAULT_KILL=f"start:{GENERATE_ROLLOUTS}:1"))
    assert killed.returncode == -9
    weights = next(checkpoint_dir(runs / "rot", 0).glob("*.safetensors"))
    with open(weights, "r+b") as f:  # one byte rots on disk, the size stays
        f.seek(weights.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    done = train(args, run_env(prefect_api))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "does not match the SHA-256" in done.stdout + done.stderr
    assert list((runs / "rot/.damaged").glob(f"*/{iter_name(0)}/{SAVE_CHECKPOINT}"))
    assert_same_run(reference_run, runs / "rot")
