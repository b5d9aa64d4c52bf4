"""A LoRA run (tiny model): checkpoints hold merged weights plus the adapter, each update
continues the previous adapter, the registry gets a plain model folder."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from cli.main import main
from mars_core.run.checkpoint import TRAINER_STATE
from mars_core.run.layout import checkpoint_dir, final_model_dir, start_model_dir
from mars_core.training.lora import ADAPTER
from tests.conftest import REPO

SMOKE = str(REPO / "configs/smoke.yaml")


# bf16: the update holds its frozen weights in bf16 and merges into the fp32 start read again
@pytest.mark.parametrize("bf16", [pytest.param("off", marks=pytest.mark.full), "on"])  # `make test`: bf16 on
def test_lora_run_trains_the_adapter_and_publishes_merged_weights(tmp_path, prefect_api,
                                                                  tiny_model_dir, bf16):
    sets = [f"model.path={tiny_model_dir}", f"model.bf16={bf16}", "model.max_context_tokens=1024",
            "rollout.max_new_tokens=8", "warmup.steps=1", "warmup.probe_games=1",
            "evaluation.every=0", "trainer.lora.rank=4", "optim.lr=1e-2",
            # the tiny model's replies all fail alike: every advantage is 0, so the entropy
            # bonus is what gives the adapter a gradient
            "algorithm.entropy_coef=0.5"]
    assert main(["train", "--config", SMOKE, "--runs-dir", str(tmp_path), "--run-name", "l",
                 *[a for s in sets for a in ("--set", s)]]) == 0
    run = tmp_path / "l"
    ck0, ck1 = checkpoint_dir(run, 0), checkpoint_dir(run, 1)
    a0 = load_file(ck0 / ADAPTER / "adapter_model.safetensors")
    a1 = load_file(ck1 / ADAPTER / "adapter_model.safetensors")
    assert a0 and a0.keys() == a1.keys()
    moved = [k for k in a0 if "lora_B" in k and not torch.equal(a0[k], a1[k])]
    assert moved and all(a0[k].abs().max() > 0 for k in moved)  # iteration 1 continued it
    assert (ck1 / TRAINER_STATE).stat().st_size < 2**20  # the adapter's optimizer state only
    merged = load_file(ck1 / "model.safetensors")
    start = load_file(start_model_dir(run) / "model.safetensors")
    assert merged.keys() == start.keys()  # a plain model: the adapter merged in
    assert {t.dtype for t in merged.values()} == {t.dtype for t in start.values()}
    assert any(not torch.equal(merged[k], start[k]) for k in merged if "q_proj" in k)
    assert all(torch.equal(merged[k], start[k]) for k in merged if "mlp" in k)  # not adapted
    final = final_model_dir(run)
    assert (final / "model.safetensors").is_file() and not (final / ADAPTER).exists()
