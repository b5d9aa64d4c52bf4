"""The vLLM server killed mid-rollout (the CPU build, launched by `mars train`): the stage
fails at once with one line saying the server died (no wait for the request timeout), nothing
is marked finished, the server's whole process group (engine core and worker included) is
gone, and running the same command again starts a new server and finishes the run."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from cli.main import main
from mars_core.engines.vllm_ext.mars_keeper import live_processes
from mars_core.run.layout import GENERATE_ROLLOUTS, SAVE_CHECKPOINT, TRAIN_STEP, stage_dir
from mars_core.run.procgroup import group_tree
from mars_core.run.commit import is_done
from tests.conftest import REPO

pytestmark = pytest.mark.vllm


def _children(pid: int) -> list[int]:
    return [p for p, (parent, _) in live_processes().items() if parent == pid]


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] \
            not in "ZX"
    except OSError:
        return False


def _kill_server_mid_rollout(run: Path, killed: dict, stop: threading.Event) -> None:
    """Once iteration 0's rollout has requests in flight, SIGKILL the vLLM API server (the
    keeper's child), as the OOM killer would."""
    from tasks.vllm_launch import _VLLM_ENGINES

    while not stop.is_set():
        engine = next(iter(_VLLM_ENGINES.values()), None)
        proc = engine.server.process if engine is not None else None
        if (proc is not None and engine.stats["max_in_flight"] > 0
                and (run / "iter_0000" / "generate_rollouts.partial").is_dir()):
            [api_server] = _children(proc.pid)
            killed.update(pgid=proc.pid, tree=group_tree(proc.pid), at=time.monotonic())
            os.kill(api_server, signal.SIGKILL)
            return
        time.sleep(0.02)


def test_server_killed_mid_rollout_fails_the_stage_and_a_rerun_finishes(
        vllm_python, tmp_path, prefect_api, served_model, capfd):
    sets = [f"model.path={served_model}", "engine.backend=vllm",
            f"engine.vllm.launch.python={vllm_python}", "engine.vllm.launch.dtype=float32",
            "engine.vllm.launch.enforce_eager=true", "run.iterations=1", "evaluation.every=0",
            "warmup.steps=0", "rollout.episodes_per_iteration=2"]
    argv = ["train", "--config", str(REPO / "configs/smoke.yaml"), "--runs-dir", str(tmp_path),
            "--run-name", "fault", *[a for s in sets for a in ("--set", s)]]
    run = tmp_path / "fault"
    killed: dict = {}
    stop = threading.Event()
    killer = threading.Thread(target=_kill_server_mid_rollout, args=(run, killed, stop),
                              daemon=True)
    killer.start()
    try:
        rc = main(argv)  # the CLI turns the VLLMError into one line and exit code 2
    finally:
        stop.set()
    assert killed, "the rollout ended before the server could be killed"
    assert rc == 2
    assert time.monotonic() - killed["at"] < 60  # at once, not after request_timeout_s (600)
    # (a progress bar cut short may precede it on the same line)
    message, = [line[line.index("mars: error:"):] for line in capfd.readouterr().err.splitlines()
                if "mars: error:" in line]
    assert message.startswith("mars: error: the vLLM server")
    assert "died (killed by SIGKILL)" in message
    assert "run the same command again" in message
    assert not is_done(stage_dir(run, 0, GENERATE_ROLLOUTS))
    assert len(killed["tree"]) >= 4  # keeper, API server, engine core, worker
    assert not [p for p in killed["tree"] if _alive(p)]  # the server's processes went too
    assert not (run / "vllm_server.pid").exists()

    assert main(argv) == 0  # resume: a new server, the run finishes
    for stage in (GENERATE_ROLLOUTS, TRAIN_STEP, SAVE_CHECKPOINT):
        assert is_done(stage_dir(run, 0, stage))
    assert not (run / "vllm_server.pid").exists()
