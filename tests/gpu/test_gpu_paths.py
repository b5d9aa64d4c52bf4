"""The GPU paths (run on a CUDA machine: `pytest -m gpu tests/gpu`; skipped elsewhere): the
in-process engine samples on the GPU with log-probs the trainer reproduces, and a bf16 PPO
step runs on the GPU through both trainer backends."""
from __future__ import annotations

import os

import pytest
import torch

from mars_core.config.train import AlgorithmConfig, OptimConfig, TrainerConfig
from mars_core.engines.hf import HFEngine
from mars_core.training.trainer import (Forward, Sample, TorchUpdater, make_optimizer, ppo_update,
                                        sequence_logprobs)
from mars_core.types import SamplingParams

pytestmark = pytest.mark.gpu


def test_engine_samples_on_the_gpu_with_matching_logprobs(tiny_model_dir):
    engine = HFEngine.from_path(tiny_model_dir)
    assert engine.device.type == "cuda"
    prompts = [[1, 2, 3, 4], [5, 6, 7]]
    done = engine.generate(prompts, SamplingParams(temperature=1.0, top_p=1.0, top_k=0,
                                                   max_new_tokens=8, seed=1))
    for p, c in zip(prompts, done):
        logp, _ = sequence_logprobs(engine.model, [Sample(tuple(p), c.token_ids, 0.0)], Forward(0))
        assert torch.allclose(logp[0].cpu(), torch.tensor(c.logprobs), atol=1e-4)


@pytest.mark.parametrize("backend", ["torch", "deepspeed"])
def test_a_bf16_ppo_step_on_the_gpu(backend, tiny_model_dir):
    from mars_core.models.weights import load_model

    model = load_model(tiny_model_dir).cuda()
    optim = OptimConfig(lr=1e-3, warmup_steps=0, micro_batch_size=2)
    if backend == "deepspeed":
        pytest.importorskip("deepspeed")
        from mars_core.training.deepspeed_backend import init_deepspeed

        for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29541", "RANK": "0",
                     "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
            os.environ.setdefault(k, v)
        engine, updater = init_deepspeed(model, TrainerConfig(backend="deepspeed"), optim,
                                         True, 4, world=1)
        model = engine.module
    else:
        opt, sched = make_optimizer(model, optim, 4)
        updater = TorchUpdater(model, opt, sched, optim.grad_clip)
    before = [p.detach().float().clone() for p in model.parameters()]
    samples = [Sample((1, 2, 3), (4, 5), 1.0), Sample((6, 7), (8, 9, 10), -1.0)]
    m = ppo_update(model, None, updater, samples, AlgorithmConfig(kl_coef=0.0), optim,
                   pad_id=0, seed=0, bf16=backend == "torch", progress=False)
    assert m["optimizer_steps"] == 1 and torch.isfinite(torch.tensor(m["loss"]))
    assert any(not torch.equal(b, p.detach().float()) for b, p in zip(before, model.parameters()))
