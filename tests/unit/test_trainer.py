"""The PPO update on a tiny random model: parameters move, micro-batching doesn't change it
(for every loss aggregation, with and without KL), PPO epochs, entropy, optional reference."""
import copy
from dataclasses import replace

import pytest
import torch

from mars_core.run.checkpoint import load_trainer_state, save_trainer_state
from mars_core.config import AlgorithmConfig, OptimConfig
from mars_core.training.losses import AGGREGATIONS, aggregate
from mars_core.models.weights import load_model
from mars_core.training.chunks import rank_chunks as _rank_chunks
from mars_core.training.trainer import (METRIC_MAXES, METRIC_SUMS, Forward, Sample, TorchUpdater,
                                        _chunks, _plan, _step,
                                        enable_gradient_checkpointing, lr_lambda, make_optimizer,
                                        ppo_update, sequence_logprobs)


def _samples(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = torch.randint(5, 200, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g)
        c = torch.randint(5, 200, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g)
        out.append(Sample(tuple(p.tolist()), tuple(c.tolist()), float(i % 3) - 1.0,
                          game="ab"[i % 2]))
    return out


def at(samples, temperature):
    """The samples as if drawn at `temperature`."""
    return [replace(s, temperature=temperature) for s in samples]


@pytest.fixture
def model(tiny_model_dir):
    torch.manual_seed(0)
    return load_model(tiny_model_dir)


def test_sequence_logprobs_match_unpadded_forward(model):
    samples = at(_samples(4), 0.7)
    logp, mask = sequence_logprobs(model, samples, Forward(0))
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
    m = ppo_update(model, ref, TorchUpdater(model, opt, sched, optim.grad_clip),
                   at(_samples(), 0.6), AlgorithmConfig(), optim, pad_id=0, seed=0,
                   progress=False)
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
    ppo_update(model, model, TorchUpdater(model, opt, sched, optim.grad_clip), samples,
               AlgorithmConfig(kl_coef=0.0), optim,
               pad_id=0, seed=0, progress=False)
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
    ppo_update(model, model, TorchUpdater(model, opt, sched, optim.grad_clip), _samples(4),
               AlgorithmConfig(kl_coef=0.0), optim,
               pad_id=0, seed=0, progress=False)
    save_trainer_state(tmp_path, opt, sched, iteration=3)
    opt2, sched2 = make_optimizer(model, optim, total_steps=5)
    assert load_trainer_state(tmp_path, opt2, sched2) == 3
    assert sched2.last_epoch == sched.last_epoch == 1
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert load_trainer_state(tmp_path / "none", opt2, sched2) == -1


def test_sequence_logprobs_entropy_matches_unpadded_forward(model):
    samples = at(_samples(3, seed=1), 0.7)
    logp, mask = sequence_logprobs(model, samples, Forward(0))
    logp2, mask2, ent = sequence_logprobs(model, samples, Forward(0), with_entropy=True)
    assert torch.equal(logp, logp2) and torch.equal(mask, mask2) and ent.shape == logp.shape
    for i, s in enumerate(samples):
        ids = torch.tensor([list(s.prompt_ids) + list(s.completion_ids)])
        lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1] / 0.7, -1)
        ref = -(lp.exp() * lp).sum(-1)[-len(s.completion_ids):]
        assert torch.allclose(ent[i][mask[i].bool()], ref, atol=1e-5)
    assert ent.requires_grad


def _sgd(model):
    """Plain SGD with a constant lr: the parameters after a step are linear in the gradient,
    so 'same update' can be checked tightly."""
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)


def _params_after(model, samples, algo, optim, ref=None, sgd=True, seed=0):
    model = copy.deepcopy(model)
    opt, sched = _sgd(model) if sgd else make_optimizer(model, optim, total_steps=8)
    m = ppo_update(model, ref, TorchUpdater(model, opt, sched, optim.grad_clip),
                   at(samples, 0.8), algo, optim, pad_id=0, seed=seed, progress=False)
    return {n: p.detach().clone() for n, p in model.named_parameters()}, m, sched


def _max_diff(a, b):
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.fixture
def perturbed_ref(model):
    """A reference that differs from the policy, so the KL term has a gradient."""
    ref = copy.deepcopy(model)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return ref


@pytest.mark.parametrize("kl_coef", [0.0, 0.5])
@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_one_batch_of_8_equals_8_micro_batches(model, perturbed_ref, mode, kl_coef):
    samples = _samples(8)
    algo = AlgorithmConfig(kl_coef=kl_coef, loss_aggregation=mode, dual_clip=1.4)
    ref = perturbed_ref if kl_coef else None
    # no clipping: a gradient off by a constant factor would be hidden by the clip
    one, m1, _ = _params_after(model, samples, algo, OptimConfig(micro_batch_size=8, grad_clip=1e6), ref)
    eight, m8, _ = _params_after(model, samples, algo, OptimConfig(micro_batch_size=1, grad_clip=1e6), ref)
    start = {n: p.detach() for n, p in model.named_parameters()}
    step = _max_diff(one, start)
    assert step > 0.1  # large enough to see a wrong weighting; fp32 noise is ~1e-5 of it
    assert _max_diff(one, eight) < 1e-4 * step
    for key in ("loss", "pg_loss", "kl", "clip_frac", "ratio_mean", "grad_norm"):
        assert m1[key] == pytest.approx(m8[key], rel=1e-4, abs=1e-7), key
    assert (m1["kl"] > 0) == (kl_coef > 0)


def test_aggregation_modes_give_different_updates(model):
    samples, optim = _samples(8), OptimConfig(micro_batch_size=8, grad_clip=1e6)
    params = [_params_after(model, samples, AlgorithmConfig(kl_coef=0.0, loss_aggregation=m),
                            optim)[0] for m in AGGREGATIONS]
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert _max_diff(params[a], params[b]) > 1e-2, (AGGREGATIONS[a], AGGREGATIONS[b])


@pytest.mark.parametrize("minibatches", [1, 2])
def test_ppo_epochs_multiply_optimizer_steps_and_move_further(model, minibatches):
    samples, optim = _samples(8), OptimConfig(lr=1e-3, warmup_steps=0, minibatches=minibatches)
    start = {n: p.detach() for n, p in model.named_parameters()}
    moved = {}
    for epochs in (1, 2):
        algo = AlgorithmConfig(kl_coef=0.0, ppo_epochs=epochs)
        params, m, sched = _params_after(model, samples, algo, optim, sgd=False)
        assert sched.last_epoch == m["optimizer_steps"] == epochs * minibatches
        assert m["samples"] == 8.0
        moved[epochs] = sum(float((params[n] - start[n]).norm()) for n in start)
    assert moved[2] > 1.25 * moved[1]


def _row_counter(module):
    """Counts rows through `module`'s forward, split by whether autograd was on."""
    rows = {True: 0, False: 0}
    module.register_forward_hook(
        lambda _m, args, kwargs, _out: rows.__setitem__(
            torch.is_grad_enabled(), rows[torch.is_grad_enabled()] + kwargs["input_ids"].shape[0]),
        with_kwargs=True)
    return rows


@pytest.mark.parametrize("epochs,minibatches,old_rows", [(1, 1, 0), (1, 2, 8), (3, 2, 8), (2, 1, 8)])
def test_old_and_reference_logprobs_are_computed_once(model, perturbed_ref, epochs, minibatches,
                                                      old_rows):
    policy = copy.deepcopy(model)
    rows, ref_rows = _row_counter(policy), _row_counter(perturbed_ref)
    opt, sched = _sgd(policy)
    algo = AlgorithmConfig(kl_coef=0.2, ppo_epochs=epochs)
    optim = OptimConfig(micro_batch_size=3, minibatches=minibatches)
    ppo_update(policy, perturbed_ref, TorchUpdater(policy, opt, sched, optim.grad_clip),
               _samples(8), algo, optim, pad_id=0, seed=0, progress=False)
    assert rows == {True: 8 * epochs, False: old_rows}
    assert ref_rows == {True: 0, False: 8}  # once per sample, not per epoch or minibatch


def test_plan_reshuffles_per_epoch_and_balances_games():
    samples = _samples(12)  # games a, b alternate: 6 each
    plan = _plan(samples, epochs=4, n_mb=3, seed=5)
    assert plan[0] == _plan(samples, epochs=1, n_mb=3, seed=5)[0]  # epoch 0: the 1-epoch order
    for epoch in plan:
        assert sorted(i for mb in epoch for i in mb) == list(range(12))
        for mb in epoch:
            assert sorted(samples[i].game for i in mb) == ["a", "a", "b", "b"]
    assert len({tuple(map(tuple, epoch)) for epoch in plan}) > 1


def test_entropy_is_always_measured_and_trained_only_when_its_coefficient_is_on(model):
    """Token entropy is measured whatever its coefficient (never a placeholder 0); only a
    coefficient > 0 makes it a loss term that changes the update."""
    samples, optim = _samples(8), OptimConfig(micro_batch_size=3)
    off, m_off, _ = _params_after(model, samples, AlgorithmConfig(kl_coef=0.0), optim)
    with torch.no_grad():
        _, mask, ent = sequence_logprobs(model, at(samples, 0.8), Forward(0), with_entropy=True)
    assert m_off["entropy"] == pytest.approx(float(aggregate(ent, mask, "seq_mean_token_mean")),
                                             rel=1e-4)
    assert m_off["entropy"] > 0
    algo = AlgorithmConfig(kl_coef=0.0, entropy_coef=0.5, loss_aggregation="token_mean")
    on, m_on, _ = _params_after(model, samples, algo, optim)
    assert m_on["entropy"] == pytest.approx(float(aggregate(ent, mask, "token_mean")), rel=1e-4)
    assert m_on["loss"] == pytest.approx(m_on["pg_loss"] - 0.5 * m_on["entropy"], rel=1e-4)
    assert _max_diff(on, off) > 1e-5  # the bonus changes the update


def test_no_reference_needed_without_kl(model):
    policy = copy.deepcopy(model)
    opt, sched = _sgd(policy)
    updater = TorchUpdater(policy, opt, sched, grad_clip=1.0)
    m = ppo_update(policy, None, updater, _samples(4), AlgorithmConfig(kl_coef=0.0),
                   OptimConfig(), pad_id=0, seed=0, progress=False)
    assert m["kl"] == 0.0 and m["optimizer_steps"] == 1.0
    with pytest.raises(ValueError, match="reference model"):
        ppo_update(policy, None, updater, _samples(4), AlgorithmConfig(kl_coef=0.2),
                   OptimConfig(), pad_id=0, seed=0, progress=False)


@pytest.mark.parametrize("n,micro,world", [(5, 2, 2), (8, 3, 3), (1, 2, 2), (7, 1, 4)])
def test_rank_chunks_deal_every_sample_once_with_equal_backward_counts(n, micro, world):
    mb = list(range(10, 10 + n))
    per_rank = [_rank_chunks(mb, micro, r, world) for r in range(world)]
    assert len({len(chunks) for chunks in per_rank}) == 1  # the same number of backwards
    real = [i for chunks in per_rank for c, w in chunks if w == 1.0 for i in c]
    assert sorted(real) == mb
    pads = [(c, w) for chunks in per_rank for c, w in chunks if w != 1.0]
    assert all(w == 0.0 and len(c) == 1 for c, w in pads)
    assert _rank_chunks(mb, micro, 0, 1) == [(c, 1.0) for c in _chunks(mb, micro)]


def _rank_grads(model, ref_logps, old_logps, samples, mb, algo, optim, rank, world):
    """One rank's accumulated gradient and metric sums of minibatch `mb` (no communication)."""
    model = copy.deepcopy(model)
    up = TorchUpdater(model, *_sgd(model), grad_clip=1.0)
    up.zero_grad()
    m = _step(model, up, ref_logps, old_logps, samples, mb, algo, optim, Forward(0), rank, world)
    return {n: p.grad.clone() for n, p in model.named_parameters()}, m


def test_ranks_gradients_average_to_the_one_process_gradient(model, perturbed_ref):
    """DeepSpeed averages the ranks' gradients; each rank's loss carries a factor `world`, so
    the average is the one-big-batch gradient, and the metric sums add up over ranks."""
    samples, optim = at(_samples(7), 0.8), OptimConfig(micro_batch_size=2)
    algo = AlgorithmConfig(kl_coef=0.3, loss_aggregation="token_mean")
    mb = list(range(7))
    with torch.no_grad():
        ref = {i: sequence_logprobs(perturbed_ref, [s], Forward(0))[0][0]
               for i, s in enumerate(samples)}
    one, m1 = _rank_grads(model, ref, None, samples, mb, algo, optim, 0, 1)
    parts = [_rank_grads(model, ref, None, samples, mb, algo, optim, r, 3) for r in range(3)]
    for name in one:
        mean = sum(g[name] for g, _ in parts) / 3
        assert torch.allclose(mean, one[name], atol=1e-6, rtol=1e-4), name
    for key in ("loss", "pg_loss", "kl", "clip_frac", "ratio_mean"):
        assert sum(m[key] for _, m in parts) == pytest.approx(m1[key], rel=1e-5, abs=1e-8), key


def test_zero_weight_padding_pass_leaves_gradients_zero(model):
    """Rank 1 of 2 on a one-sample minibatch only pads: it runs a backward (ZeRO needs the
    same count on every rank) whose gradient is exactly zero, and reports zeros."""
    grads, m = _rank_grads(model, None, None, _samples(3), [2], AlgorithmConfig(kl_coef=0.0),
                           OptimConfig(micro_batch_size=4), rank=1, world=2)
    assert all(torch.count_nonzero(g) == 0 for g in grads.values())
    assert set(m) == {"loss", *METRIC_SUMS, *METRIC_MAXES}
    assert all(v == 0.0 for v in m.values())


def test_world_one_never_touches_torch_distributed(model, monkeypatch):
    def boom(*_a, **_k):
        raise AssertionError("torch.distributed used with world == 1")

    monkeypatch.setattr(torch.distributed, "all_reduce", boom)
    monkeypatch.setattr(torch.distributed, "all_gather_object", boom)
    algo = AlgorithmConfig(kl_coef=0.2)
    _params_after(model, _samples(6), algo, OptimConfig(micro_batch_size=2, minibatches=2), ref=model)
    with pytest.raises(ValueError, match="rank 2 is not in"):
        ppo_update(model, None, None, _samples(2), AlgorithmConfig(kl_coef=0.0), OptimConfig(),
                   pad_id=0, seed=0, progress=False, rank=2, world=2)


def test_gradient_checkpointing_helper_gives_the_same_gradients(model):
    samples = _samples(4)
    plain = _grads_after(model, 4, samples)
    ckpt = copy.deepcopy(model)
    enable_gradient_checkpointing(ckpt, True)
    enable_gradient_checkpointing(model, False)

    def on(m):
        return any(getattr(mod, "gradient_checkpointing", False) for mod in m.modules())

    assert on(ckpt) and not on(model)
    with_ckpt = _grads_after(ckpt, 4, samples)
    for name in plain:
        assert torch.allclose(plain[name], with_ckpt[name], atol=1e-6), name


def test_the_trust_region_stops_the_update_once_the_kl_to_the_old_policy_passes_its_bound(
        model):
    """algorithm.max_kl: the first step always runs; a step whose minibatch already finds the
    weights past the bound is not taken (its gradient dropped), nor any after it."""
    samples = [replace(s, advantage=(-1.0) ** i) for i, s in enumerate(_samples(8))]
    optim = OptimConfig(warmup_steps=0, minibatches=4)

    def update(bound):
        policy, seen = copy.deepcopy(model), []
        opt = torch.optim.SGD(policy.parameters(), lr=50.0)  # steps that move the log-probs
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        m = ppo_update(policy, None, TorchUpdater(policy, opt, sched, grad_clip=1.0), samples,
                       AlgorithmConfig(kl_coef=0.0, max_kl=bound), optim, pad_id=0, seed=0,
                       progress=False, on_step=lambda j, sm: seen.append(sm["approx_kl_old"]))
        return m, sched, seen

    m, sched, kls = update(None)
    assert m["optimizer_steps"] == sched.last_epoch == 4.0 and m["trust_region_stops"] == 0.0
    assert kls[0] == 0.0 and kls[1] > 0  # measured before each step: the first has not moved
    m, sched, seen = update(kls[1] / 2)
    assert m["optimizer_steps"] == sched.last_epoch == 1.0 and m["trust_region_stops"] == 1.0
    assert seen == kls[:1]


def test_mirror_rows_train_by_likelihood_toward_their_targets(model):
    """train_actions: mirror: each row's advantage is a target probability, fitted by
    -target x log-probability (no ratio), so a row with target 0 carries no gradient."""
    base = _samples(2)
    rows = [replace(base[0], advantage=0.0), replace(base[1], advantage=1.0)]
    algo = AlgorithmConfig(kl_coef=0.0, train_actions="mirror",
                           loss_aggregation="seq_mean_token_sum")
    fwd = Forward(0, False, True, True, None)
    policy = copy.deepcopy(model)
    m = _step(policy, TorchUpdater(policy, *_sgd(policy), grad_clip=1.0), None, None, rows,
              [0, 1], algo, OptimConfig(), fwd)
    logp, mask = sequence_logprobs(policy, [rows[1]], fwd)
    assert m["pg_loss"] == pytest.approx(-float((logp * mask).sum().detach()) / 2, rel=1e-4)
