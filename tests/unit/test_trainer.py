"""The PPO update on a tiny random model: parameters move, micro-batching doesn't change it."""
import copy

import pytest
import torch

from mars_core.checkpoint import load_trainer_state, save_trainer_state
from mars_core.config import AlgorithmConfig, OptimConfig
from mars_core.models import load_model
from mars_core.trainer import Sample, lr_lambda, make_optimizer, ppo_update, sequence_logprobs


def _samples(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = torch.randint(5, 200, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g)
        c = torch.randint(5, 200, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g)
        out.append(Sample(tuple(p.tolist()), tuple(c.tolist()), float(i % 3) - 1.0))
    return out


@pytest.fixture
def model(tiny_model_dir):
    torch.manual_seed(0)
    return load_model(tiny_model_dir)


def test_sequence_logprobs_match_unpadded_forward(model):
    samples = _samples(4)
    logp, mask = sequence_logprobs(model, samples, 0.7, pad_id=0)
    for i, s in enumerate(samples):
        ids = torch.tensor([list(s.prompt_ids) + list(s.completion_ids)])
        logits = model(input_ids=ids).logits[0, :-1] / 0.7
        ref = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0][-len(s.completion_ids):]
        got = logp[i][mask[i].bool()]
        assert torch.allclose(got, ref, atol=1e-5)


def test_every_parameter_changes_after_one_step(model):
    ref = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optim = OptimConfig(lr=1e-3, warmup_steps=0, micro_batch_size=4)
    opt, sched = make_optimizer(model, optim, total_steps=4)
    m = ppo_update(model, ref, opt, sched, _samples(), AlgorithmConfig(), optim, temperature=0.6,
                   pad_id=0, seed=0, progress=False)
    assert {"loss", "kl", "grad_norm", "lr", "clip_frac"} <= set(m)
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []


def _grads_after(model, micro, samples):
    model = copy.deepcopy(model)
    optim = OptimConfig(lr=1e-3, warmup_steps=0, micro_batch_size=micro)
    opt, sched = make_optimizer(model, optim, total_steps=4)
    captured = {}

    def capture():
        captured.update({n: p.grad.clone() for n, p in model.named_parameters()})

    opt.register_step_pre_hook(lambda *_: capture())
    ppo_update(model, model, opt, sched, samples, AlgorithmConfig(kl_coef=0.0), optim,
               temperature=1.0, pad_id=0, seed=0, progress=False)
    return captured


def test_gradient_accumulation_is_invariant(model):
    samples = _samples(8)
    one = _grads_after(model, 8, samples)
    eight = _grads_after(model, 1, samples)
    for name in one:
        assert torch.allclose(one[name], eight[name], atol=1e-6, rtol=1e-4), name


def test_lr_schedule_warmup_then_cosine():
    f = lr_lambda(2, 10)
    assert [round(f(s), 3) for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]


def test_trainer_state_round_trip(model, tmp_path):
    optim = OptimConfig(lr=1e-3, warmup_steps=1)
    opt, sched = make_optimizer(model, optim, total_steps=5)
    ppo_update(model, model, opt, sched, _samples(4), AlgorithmConfig(kl_coef=0.0), optim,
               temperature=1.0, pad_id=0, seed=0, progress=False)
    save_trainer_state(tmp_path, opt, sched, iteration=3)
    opt2, sched2 = make_optimizer(model, optim, total_steps=5)
    assert load_trainer_state(tmp_path, opt2, sched2) == 3
    assert sched2.last_epoch == sched.last_epoch == 1
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert load_trainer_state(tmp_path / "none", opt2, sched2) == -1
