"""LoRA training: only the adapter trains, the reference is the start policy with the adapters
off, the merged checkpoint is the trained policy, and the next update continues the adapter."""
from __future__ import annotations

import copy

import pytest
import torch

from mars_core.training import lora
from mars_core.run.checkpoint import load_trainer_state, save_trainer_state
from mars_core.config import AlgorithmConfig, OptimConfig, load_config
from mars_core.models.weights import load_model
from mars_core.training.trainer import Forward, Sample, TorchUpdater, make_optimizer, ppo_update, \
    sequence_logprobs

LORA = load_config(None, ["trainer.lora.rank=4"]).trainer.lora


def samples(n=6):
    g = torch.Generator().manual_seed(0)
    return [Sample(tuple(torch.randint(5, 200, (9,), generator=g).tolist()),
                   tuple(torch.randint(5, 200, (4,), generator=g).tolist()), float(i % 3) - 1.0)
            for i in range(n)]


def logps(model, batch):
    with torch.no_grad():
        return sequence_logprobs(model, batch, Forward(0))[0]


@pytest.fixture
def base(tiny_model_dir):
    return load_model(tiny_model_dir)


def train(model, batch, steps=1):
    optim = OptimConfig(lr=5e-2, warmup_steps=0, micro_batch_size=3)
    opt, sched = make_optimizer(model, optim, total_steps=steps)
    for _ in range(steps):
        ppo_update(model, lora.AdaptersOff(model), TorchUpdater(model, opt, sched, 1.0), batch,
                   AlgorithmConfig(kl_coef=0.2), optim, pad_id=0, seed=0, progress=False)
    return opt, sched


def test_only_the_adapter_trains_and_the_reference_stays_the_start_policy(base):
    start = copy.deepcopy(base)
    model = lora.attach(base, LORA)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == set(LORA.target_modules)
    batch = samples()
    assert torch.allclose(logps(model, batch), logps(start, batch), atol=1e-6)  # B starts at 0
    train(model, batch)
    assert not torch.allclose(logps(model, batch), logps(start, batch), atol=1e-4)
    assert torch.allclose(logps(lora.AdaptersOff(model), batch), logps(start, batch), atol=1e-6)
    base_now = {n.replace("base_layer.", ""): p for n, p in
                model.get_base_model().named_parameters() if "lora_" not in n}
    for name, p in start.named_parameters():
        assert torch.equal(p, base_now[name]), name  # the base weights never move


def test_checkpoint_holds_the_merged_policy_and_the_adapter_continues(base, tiny_model_dir,
                                                                      tokenizer, tmp_path):
    batch = samples()
    model = lora.attach(base, LORA)
    opt, sched = train(model, batch)
    trained = logps(model, batch)
    save_trainer_state(tmp_path, opt, sched, 0)
    lora.save(tmp_path, model, tokenizer)
    assert (tmp_path / lora.ADAPTER / "adapter_config.json").is_file()
    merged = load_model(tmp_path)  # a plain model folder: what rollouts and the registry load
    assert torch.allclose(logps(merged, batch), trained, atol=1e-5)
    again = lora.attach(load_model(tiny_model_dir), LORA, tmp_path / lora.ADAPTER)
    assert torch.allclose(logps(again, batch), trained, atol=1e-5)
    opt2, sched2 = make_optimizer(again, OptimConfig(lr=5e-2, warmup_steps=0), total_steps=1)
    assert load_trainer_state(tmp_path, opt2, sched2) == 0  # the adapter's optimizer state
    assert [p.shape for g in opt2.param_groups for p in g["params"]] == \
        [p.shape for g in opt.param_groups for p in g["params"]]
    assert all(p.requires_grad for g in opt2.param_groups for p in g["params"])


def test_lora_needs_the_torch_backend():
    from mars_core.config import ConfigError

    with pytest.raises(ConfigError, match="trainer.lora needs trainer.backend: torch"):
        load_config(None, ["trainer.lora.rank=4", "trainer.backend=deepspeed"])


def test_a_bf16_base_changes_no_bit_of_a_bf16_update_and_merges_into_the_fp32_start(
        tiny_model_dir, tokenizer, tmp_path):
    """Under bf16 autocast the frozen base weights are cast at every forward anyway: holding
    them in bf16 trains the same adapter to the bit, and the checkpoint is the adapter merged
    into the fp32 start policy, as without it."""
    from safetensors.torch import load_file

    batch, optim = samples(), OptimConfig(lr=5e-2, warmup_steps=0, micro_batch_size=3)
    trained = {}
    for cast in (False, True):
        torch.manual_seed(0)  # the same fresh adapter
        model = lora.attach(load_model(tiny_model_dir), LORA)
        if cast:
            assert lora.hold_base_in_bf16(model) > 0
            assert {p.dtype for n, p in model.named_parameters() if "lora_" not in n} \
                >= {torch.bfloat16}
        opt, sched = make_optimizer(model, optim, total_steps=2)
        for _ in range(2):
            ppo_update(model, lora.AdaptersOff(model), TorchUpdater(model, opt, sched, 1.0),
                       batch, AlgorithmConfig(kl_coef=0.2), optim, pad_id=0, seed=0,
                       bf16=True, progress=False)
        with torch.no_grad():
            trained[cast] = sequence_logprobs(model, batch, Forward(0, bf16=True))[0]
        folder = tmp_path / str(cast)
        if cast:  # as the update saves it: the adapter, then merged into the fp32 start
            lora.save_adapter(folder, model)
            lora.merge_into_start(folder, tiny_model_dir, tokenizer)
        else:
            lora.save(folder, model, tokenizer)
    assert torch.equal(trained[False], trained[True])
    adapters = [load_file(tmp_path / str(c) / lora.ADAPTER / "adapter_model.safetensors")
                for c in (False, True)]
    assert adapters[0].keys() == adapters[1].keys()
    assert all(torch.equal(adapters[0][k], adapters[1][k]) for k in adapters[0])
    merged = [load_file(tmp_path / str(c) / "model.safetensors") for c in (False, True)]
    assert merged[0].keys() == merged[1].keys()
    assert all(merged[1][k].dtype == torch.float32 and torch.equal(merged[0][k], merged[1][k])
               for k in merged[0])
