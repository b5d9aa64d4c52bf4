"""The update as the method runs it: several optimizer steps per batch under one trust region
(the ratio is 1 at the first step only, and clipped at its bounds after), and decoupled PPO's
truncated importance weight min(pi_old / pi_behaviour, C) for tokens an older or other policy
drew (a window-2 bank turn, another engine's kernels, a truncated sampler)."""
from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from mars_core.config import AlgorithmConfig, OptimConfig
from mars_core.training.losses import aggregate, importance_weights, policy_loss
from mars_core.models.weights import load_model
from mars_core.training.trainer import Forward, Sample, TorchUpdater, ppo_update, sequence_logprobs


def _samples(n=8, seed=0, temperature=0.8):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = torch.randint(5, 200, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g)
        c = torch.randint(5, 200, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g)
        out.append(Sample(tuple(p.tolist()), tuple(c.tolist()), float(i % 3) - 1.0,
                          game="ab"[i % 2], temperature=temperature))
    return out


@pytest.fixture
def model(tiny_model_dir):
    torch.manual_seed(0)
    return load_model(tiny_model_dir)


def _update(model, samples, algo, optim, lr=0.05):
    """A copy of `model` after one ppo_update (Adam, constant lr); returns the per-step
    metrics and the totals."""
    model = copy.deepcopy(model)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    steps = []
    totals = ppo_update(model, None, TorchUpdater(model, opt, sched, 1e9), samples, algo, optim,
                        pad_id=0, seed=0, progress=False, on_step=lambda j, m: steps.append(m))
    return steps, totals


def _behaviour_of(model, samples, shift: float = 0.0):
    """The samples as if drawn by `model` (its log-probs recorded as the behaviour), each
    log-prob moved by `shift`."""
    with torch.no_grad():
        logp, mask = sequence_logprobs(model, samples, Forward(0))
    return [replace(s, behaviour=tuple((logp[r][mask[r].bool()] + shift).tolist()))
            for r, s in enumerate(samples)]


def test_a_batch_split_into_steps_moves_the_ratio_and_clips_it_after_the_first(model):
    algo = AlgorithmConfig(kl_coef=0.0, ppo_epochs=2, clip_eps=0.1, clip_eps_high=0.15)
    steps, totals = _update(model, _samples(8), algo, OptimConfig(minibatches=2,
                                                                  micro_batch_size=4))
    assert len(steps) == totals["optimizer_steps"] == 4
    first, later = steps[0], steps[1:]
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert first["clip_frac"] == 0.0 and first["approx_kl_old"] == pytest.approx(0, abs=1e-6)
    assert all(abs(m["ratio_mean"] - 1.0) > 1e-3 for m in later)
    assert any(m["clip_frac"] > 0 for m in later)
    assert max(m["ratio_max"] for m in later) > 1.15  # beyond the upper bound: clipped there
    assert all(m["approx_kl_old"] > 0 for m in later)
    assert totals["ratio_max"] == max(m["ratio_max"] for m in steps)
    assert all(m["entropy"] > 0 for m in steps)  # measured although its coefficient is 0


def test_a_token_an_older_policy_drew_gets_a_truncated_importance_weight(model):
    """A window-2 bank turn: drawn by last iteration's weights, which gave its tokens other
    probabilities than the weights at the start of this update."""
    samples = _samples(8)
    older = copy.deepcopy(model)
    with torch.no_grad():
        for p in older.parameters():
            p.add_(0.3 * torch.randn_like(p))
    stale = _behaviour_of(older, samples)
    algo = AlgorithmConfig(kl_coef=0.0, is_cap=1.5)
    _, m = _update(model, stale, algo, OptimConfig(micro_batch_size=3))
    assert abs(m["behaviour_gap_abs"]) > 0.05 and m["is_weight_mean"] != pytest.approx(1.0)
    assert 0 < m["is_capped_frac"] < 1 and m["is_weight_max"] == pytest.approx(1.5)
    # the same samples with the behaviour the current weights give: weights 1, no gap
    _, fresh = _update(model, _behaviour_of(model, samples), algo, OptimConfig(micro_batch_size=3))
    assert fresh["behaviour_gap_abs"] == pytest.approx(0, abs=1e-5)
    assert fresh["is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    # correction off: trained as if on-policy
    _, off = _update(model, stale, AlgorithmConfig(kl_coef=0.0, is_cap=None),
                     OptimConfig(micro_batch_size=3))
    assert off["is_weight_mean"] == 1.0 and off["pg_loss"] != pytest.approx(m["pg_loss"])


def test_the_weighted_loss_is_the_weight_times_the_on_policy_one(model):
    """Per token: policy_loss with weights w equals w x the unweighted loss, w capped."""
    old = torch.log(torch.tensor([[0.5, 0.2, 0.1]]))
    behaviour = torch.log(torch.tensor([[0.5, 0.4, 0.01]]))  # ratios 1, 0.5, 10
    known = torch.ones_like(old)
    w = importance_weights(old, behaviour, known, cap=2.0)
    assert w.tolist() == [pytest.approx([1.0, 0.5, 2.0])]
    assert importance_weights(old, behaviour, torch.zeros_like(old), 2.0).tolist() == [[1, 1, 1]]
    logp, adv, mask = old + 0.1, torch.tensor([1.0]), torch.ones_like(old)
    assert torch.allclose(policy_loss(logp, old, adv, mask, weights=w),
                          w * policy_loss(logp, old, adv, mask))


def test_on_a_bandit_the_corrected_update_follows_the_on_policy_gradient():
    """Three arms, a softmax policy pi; the data were drawn by a stale policy mu that favours
    the worst arm. Uncorrected, the expected gradient is E_mu[A grad log pi] (biased toward
    mu's arms); weighted by pi/mu it is E_pi[A grad log pi], the on-policy gradient, within
    sampling error."""
    logits = torch.tensor([0.5, 0.0, -0.5])
    mu = torch.softmax(torch.tensor([-1.0, 0.0, 1.5]), -1)
    reward = torch.tensor([1.0, 0.0, -1.0])
    pi = torch.softmax(logits, -1)
    advantage = reward - (pi * reward).sum()
    on_policy = (pi * advantage).unsqueeze(-1) * (torch.eye(3) - pi)  # sum_a pi A grad log pi
    on_policy = on_policy.sum(0)

    def gradient(arms: torch.Tensor, corrected: bool) -> torch.Tensor:
        theta = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(theta, -1)[arms].unsqueeze(-1)  # one-token sequences
        old = logp.detach()
        w = (importance_weights(old, torch.log(mu)[arms].unsqueeze(-1), torch.ones_like(old),
                                cap=100.0) if corrected else None)
        loss = aggregate(policy_loss(logp, old, advantage[arms], torch.ones_like(old),
                                     weights=w), torch.ones_like(old), "token_mean")
        (-loss).backward()  # the ascent direction
        return theta.grad

    arms = torch.multinomial(mu, 40_000, replacement=True, generator=torch.Generator().manual_seed(0))
    corrected, naive = gradient(arms, True), gradient(arms, False)
    assert torch.allclose(corrected, on_policy, atol=0.02)
    assert (naive - on_policy).abs().max() > 0.1  # stale data, uncorrected: biased
