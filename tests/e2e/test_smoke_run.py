"""`mars train --config configs/smoke.yaml` on the embedded model through Prefect and MLflow."""
from __future__ import annotations

import asyncio

import pytest
from mlflow import MlflowClient

from cli.main import main
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

EXPECTED = [
    "rollout/tokens_per_s", "rollout/invalid_action_rate", "rollout/mean_reply_tokens",
    "rollout/seat0_win_rate", "rollout/seat0_draw_rate", "rollout/seat0_loss_rate",
    "reward/mean", "train/loss", "train/kl", "train/grad_norm", "train/lr",
    "time/generate_rollouts", "time/train_step", "time/assign_rewards",
    "time/compute_advantages", "time/save_checkpoint", "warmup/invalid_rate_before",
    "eval/tic_tac_toe/seat0_win_rate", "eval/tic_tac_toe/seat1_ci95",
]


async def _flow_runs():
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        return await client.read_flow_runs()


async def _flow_run_log(flow_run_id) -> str:
    """The flow run's log as the Prefect UI shows it (sent in the background: poll a while)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    text = ""
    async with get_client() as client:
        for _ in range(60):
            logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            text = "\n".join(entry.message for entry in logs)
            if "iter 2/2:" in text:
                break
            await asyncio.sleep(0.5)
    return text


def test_smoke_preset_end_to_end(tmp_path, prefect_api, embedded_dir, monkeypatch, capsys):
    monkeypatch.setenv("MARS_CACHE_DIR", str(embedded_dir.parent))
    rc = main(["train", "--config", str(REPO / "configs/smoke.yaml"), "--runs-dir", str(tmp_path)])
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]

    runs = asyncio.run(_flow_runs())
    mine = [r for r in runs if r.parameters.get("runs_dir") == str(tmp_path)]
    assert mine and mine[-1].state.is_completed()
    log = asyncio.run(_flow_run_log(mine[-1].id))
    assert "iter 1/2: reward" in log and "iter 2/2: reward" in log  # one summary line per iteration

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("mars-smoke")
    run, = [r for r in client.search_runs([exp.experiment_id]) if r.info.run_name == "smoke"]
    for key in EXPECTED:
        hist = client.get_metric_history(run.info.run_id, key)
        assert hist, f"metric {key} missing"
        assert len({m.step for m in hist}) == len(hist), f"{key} logged twice at a step"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/loss")) == [0, 1]
    assert run.data.params["rollout.games"] == "['tic_tac_toe']"
    arts = [a.path for a in client.list_artifacts(run.info.run_id, "iter_0000")]
    assert "iter_0000/transcripts.md" in arts and "iter_0000/episodes_sample.parquet" in arts
    children = client.search_runs([exp.experiment_id],
                                  f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert children and children[0].data.metrics
    mv = client.get_model_version_by_alias("mars-smoke", "candidate")
    assert mv.run_id == run.info.run_id
    files = [a.path for a in client.list_artifacts(run.info.run_id, "model")]
    assert "model/model.safetensors" in files and "model/tokenizer.json" in files
    assert not any(f.endswith("trainer_state.pt") for f in files)
