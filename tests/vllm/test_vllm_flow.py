"""The whole pipeline on the vLLM engine: `mars train` starts its own vLLM server (launch
mode), plays every iteration's games through it, makes it serve each new checkpoint by the
in-place reload and stops it at the end."""
from __future__ import annotations

import pytest

import json

from cli.main import main
from mars_core.run.layout import EVALUATE, GENERATE_ROLLOUTS, METRICS_FILE, stage_dir
from tests.conftest import REPO

pytestmark = pytest.mark.vllm


def test_smoke_preset_trains_on_a_vllm_server_it_starts(vllm_python, tmp_path, prefect_api,
                                                         served_model):
    sets = [f"model.path={served_model}", "engine.backend=vllm",
            f"engine.vllm.launch.python={vllm_python}", "engine.vllm.launch.dtype=float32",
            "engine.vllm.launch.gpu_memory_utilization=0.1", "rollout.max_new_tokens=12"]
    rc = main(["train", "--config", str(REPO / "configs/smoke.yaml"), "--runs-dir",
               str(tmp_path), "--run-name", "vllm", *[a for s in sets for a in ("--set", s)]])
    assert rc == 0
    run = tmp_path / "vllm"
    first, second = (json.loads((stage_dir(run, k, GENERATE_ROLLOUTS) / METRICS_FILE).read_text())
                     for k in (0, 1))
    assert first["rollout/weight_reloads"] == 0  # the server started on the start policy
    assert second["rollout/weight_reloads"] == 1  # then served checkpoint 0 without a restart
    assert second["rollout/max_in_flight"] > 1 and second["rollout/generated_tokens"] > 0
    log = (run / "vllm_server.log").read_text()
    assert "Reloading weights" in log
    evaluation = json.loads((stage_dir(run, 1, EVALUATE) / METRICS_FILE).read_text())
    assert any(k.startswith("eval/") for k in evaluation)
