"""The update's rows: samples with the same sequence share one row of a forward pass, within
a bound on rows and tokens, and the update stays the one a row per sample gives (loss,
gradients, metrics and the weights after several steps); the fused AdamW steps as the
for-loop one."""
import copy
from dataclasses import replace

import pytest
import torch

from mars_core.config import AlgorithmConfig, OptimConfig
from mars_core.models.weights import load_model
from mars_core.training.chunks import distinct_chunks, rank_chunks, rows_of
from mars_core.training.trainer import (Forward, Sample, TorchUpdater, _step, make_optimizer,
                                        ppo_update, sequence_logprobs)
from tests.unit.test_trainer import perturbed_ref  # noqa: F401  (the fixture: a reference apart)


def _kuhn_like(n=24, seed=0):
    """`n` samples over 4 prompts sharing a long prefix and 2 replies: many duplicates (as a
    Kuhn batch), advantages and behaviour log-probs differing per sample, one temperature
    apart (the same tokens at another temperature are another row)."""
    g = torch.Generator().manual_seed(seed)
    head = tuple(torch.randint(5, 200, (40,), generator=g).tolist())
    prompts = [head + tuple(torch.randint(5, 200, (k,), generator=g).tolist())
               for k in (3, 5, 4, 6)]
    replies = [(7, 8, 9), (10, 11)]
    out = []
    for i in range(n):
        c = replies[int(torch.randint(2, (1,), generator=g))]
        out.append(Sample(prompts[int(torch.randint(4, (1,), generator=g))], c,
                          float(torch.randn(1, generator=g)), game="ab"[i % 2],
                          temperature=0.7 if i == n - 1 else 1.0,
                          behaviour=tuple((-torch.rand(len(c), generator=g)).tolist())))
    return out


@pytest.fixture
def model(tiny_model_dir):
    torch.manual_seed(0)
    return load_model(tiny_model_dir)




def test_distinct_chunks_keep_duplicates_together_within_the_bounds():
    samples = _kuhn_like(40)
    idx = list(range(40))
    chunks = distinct_chunks(samples, idx, micro=3)
    assert sorted(i for c in chunks for i in c) == idx
    keys = [{(samples[i].prompt_ids, samples[i].completion_ids, samples[i].temperature) for i in c}
            for c in chunks]
    assert all(len(k) <= 3 for k in keys) and sum(map(len, keys)) == len(set().union(*keys))
    assert len(chunks) > 1 and len(chunks) < 40 / 3  # split, and fewer than a row per sample
    assert distinct_chunks(samples, idx, micro=3, distinct=False) == [idx[i:i + 3]
                                                                    for i in range(0, 40, 3)]
    for c in distinct_chunks(samples, idx, micro=100, max_tokens=120):
        reps, where = rows_of(samples, c)
        width = max(len(samples[i].prompt_ids) + len(samples[i].completion_ids) for i in reps)
        assert len(reps) * width <= 120 or len(reps) == 1
        assert all(samples[reps[w]].completion_ids == samples[i].completion_ids
                   and samples[reps[w]].prompt_ids == samples[i].prompt_ids
                   for i, w in zip(c, where))
    one_each = distinct_chunks(samples, idx, micro=100, max_tokens=1)  # one row always goes in
    assert all(len(rows_of(samples, c)[0]) == 1 for c in one_each)


def test_rank_chunks_pad_every_rank_to_the_most_micro_batches():
    samples = _kuhn_like(30)
    mb = list(range(30))
    per_rank = [rank_chunks(mb, 2, r, 3, samples) for r in range(3)]
    assert len({len(c) for c in per_rank}) == 1
    assert sorted(i for c in per_rank for ch, w in c if w == 1.0 for i in ch) == mb


def _rows_counter(model):
    rows = {True: 0, False: 0}
    model.model.register_forward_hook(
        lambda _m, args, kwargs, _out: rows.__setitem__(
            torch.is_grad_enabled(), rows[torch.is_grad_enabled()] + kwargs["input_ids"].shape[0]),
        with_kwargs=True)
    return rows


@pytest.mark.parametrize("mode", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum"])
def test_shared_rows_give_the_loss_and_gradients_of_a_row_per_sample(model, perturbed_ref, mode):
    ref = perturbed_ref
    """One minibatch step (`_step`) on a fixed batch: with a row per distinct sequence and with
    a row per sample (the update before rows were shared), the same loss, metrics and
    gradients within float tolerance, from fewer rows."""
    samples = _kuhn_like(24)
    algo = AlgorithmConfig(kl_coef=0.3, loss_aggregation=mode, dual_clip=1.4, entropy_coef=0.01,
                           is_cap=2.0)
    optim = OptimConfig(micro_batch_size=4)
    with torch.no_grad():
        ref_logps = {i: sequence_logprobs(ref, [s], Forward(0))[0][0]
                     for i, s in enumerate(samples)}
        old = {i: v - 0.05 * (i % 3) for i, v in ref_logps.items()}  # a ratio away from 1
    out = {}
    for distinct in (False, True):
        policy = copy.deepcopy(model)
        rows = _rows_counter(policy)
        up = TorchUpdater(policy, *make_optimizer(policy, optim, 4), grad_clip=1.0)
        up.zero_grad()
        m = _step(policy, up, ref_logps, old, samples, list(range(24)), algo, optim,
                  Forward(0, share_prefix=False, distinct=distinct))
        out[distinct] = {n: p.grad.clone() for n, p in policy.named_parameters()}, m, rows[True]
    (g0, m0, rows0), (g1, m1, rows1) = out[False], out[True]
    assert rows0 == 24 and rows1 < 12
    for name in g0:
        assert torch.allclose(g1[name], g0[name], atol=1e-6, rtol=1e-4), name
    assert max(float(g.abs().max()) for g in g0.values()) > 1e-3  # a gradient to compare
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ratio_mean", "ratio_max",
                "behaviour_gap", "is_weight_mean"):
        assert m1[key] == pytest.approx(m0[key], rel=1e-5, abs=1e-7), key


def test_an_update_with_shared_rows_and_a_token_bound_ends_at_the_same_weights(model,
                                                                              perturbed_ref):
    ref = perturbed_ref
    """Four optimizer steps with old and reference log-probs, bf16 off: the weights after the
    update with shared rows (and a token bound that splits the minibatches further) match a
    row per sample, as do the mean metrics."""
    samples = _kuhn_like(32)
    algo = AlgorithmConfig(kl_coef=0.2, is_cap=2.0)
    results = []
    for distinct, tokens in ((False, None), (True, None), (True, 100)):
        policy = copy.deepcopy(model)
        optim = OptimConfig(lr=1e-2, warmup_steps=0, micro_batch_size=4, minibatches=4,
                            micro_batch_tokens=tokens)
        up = TorchUpdater(policy, *make_optimizer(policy, optim, 4, fused=False), grad_clip=1e6)
        m = ppo_update(policy, ref, up, samples, algo, optim, pad_id=0, seed=1, progress=False,
                       distinct=distinct)
        results.append(({n: p.detach() for n, p in policy.named_parameters()}, m))
    (w0, m0), *rest = results
    start = {n: p.detach() for n, p in model.named_parameters()}
    moved = max(float((w0[n] - start[n]).abs().max()) for n in w0)
    assert moved > 1e-3
    for w, m in rest:
        assert max(float((w[n] - w0[n]).abs().max()) for n in w0) < 1e-3 * moved
        for key in ("loss", "kl", "ratio_mean", "grad_norm"):
            assert m[key] == pytest.approx(m0[key], rel=1e-3, abs=1e-6), key


def test_fused_adamw_steps_as_the_for_loop_one(model):
    samples = [replace(s, behaviour=()) for s in _kuhn_like(8)]
    after = []
    for fused in (False, True):
        policy = copy.deepcopy(model)
        optim = OptimConfig(lr=1e-2, warmup_steps=0, micro_batch_size=8, minibatches=2)
        opt, sched = make_optimizer(policy, optim, 2, fused=fused)
        assert bool(opt.param_groups[0]["fused"]) == fused
        ppo_update(policy, None, TorchUpdater(policy, opt, sched, 1.0), samples,
                   AlgorithmConfig(kl_coef=0.0), optim, pad_id=0, seed=0, progress=False)
        after.append({n: p.detach() for n, p in policy.named_parameters()})
    for name in after[0]:
        assert torch.allclose(after[0][name], after[1][name], atol=1e-6, rtol=1e-5), name
    assert make_optimizer(model, OptimConfig(), 1)[0].param_groups[0]["fused"]  # CPU default
