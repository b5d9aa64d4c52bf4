"""PPO loss, k3 KL, entropy bonus and token aggregation: per-token loop references,
hand-computed dual-clip and aggregation cases, masking, chunk additivity, and which tensors
gradient reaches."""
from __future__ import annotations

import math

import pytest
import torch

from mars_core.training.losses import (AGGREGATIONS, aggregate, aggregate_denominator, kl_k3,
                                       masked_seq_mean, policy_loss, ppo_objective)


def loop_policy_loss(logp, logp_old, adv, mask, clip_eps=0.2, dual_clip=None):
    """Plain per-token reference of `policy_loss`; adv is [B] (one per sequence)."""
    B, T = logp.shape
    out = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        a = float(adv[b])
        for t in range(T):
            if not mask[b, t]:
                continue
            rho = math.exp(float(logp[b, t]) - float(logp_old[b, t]))
            clipped = min(max(rho, 1 - clip_eps), 1 + clip_eps)
            loss = -min(rho * a, clipped * a)
            if dual_clip is not None and a < 0:
                loss = min(loss, dual_clip * abs(a))
            out[b, t] = loss
    return out


def loop_seq_mean(x, mask):
    means = []
    for b in range(x.shape[0]):
        vals = [float(x[b, t]) for t in range(x.shape[1]) if mask[b, t]]
        if vals:
            means.append(sum(vals) / len(vals))
    return sum(means) / len(means) if means else 0.0


def random_batch(seed, B=6, T=9, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    logp_old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    logp = logp_old + torch.randn(B, T, generator=g, dtype=torch.float64) * scale
    logp_ref = logp_old + torch.randn(B, T, generator=g, dtype=torch.float64) * scale
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    mask[0, :3] = 1.0  # at least one non-empty sequence
    return logp, logp_old, logp_ref, adv, mask


# ------------------------------------------------------------------------------ policy loss


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("dual_clip", [None, 1.4, 3.0])
def test_policy_loss_matches_loop(seed, dual_clip):
    logp, logp_old, _, adv, mask = random_batch(seed, scale=1.0)
    got = policy_loss(logp, logp_old, adv, mask, clip_eps=0.2, dual_clip=dual_clip)
    want = loop_policy_loss(logp, logp_old, adv, mask, 0.2, dual_clip)
    assert got.shape == logp.shape
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_policy_loss_hand_cases():
    # columns: rho = e^0 = 1, e^0.5 = 1.6487, e^2 = 7.389, e^-1 = 0.3679
    d = torch.tensor([0.0, 0.5, 2.0, -1.0], dtype=torch.float64)
    logp = d.repeat(2, 1)
    logp_old = torch.zeros(2, 4, dtype=torch.float64)
    mask = torch.ones(2, 4)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    e = math.exp
    # A = +1: -min(rho, clip(rho)) -> -1, -1.2, -1.2, -e^-1 (unclipped is smaller)
    # A = -1: -min(-rho, -clip(rho)) = max(rho, clip) -> 1, e^0.5, e^2, 0.8
    plain = policy_loss(logp, logp_old, adv, mask)
    torch.testing.assert_close(plain, torch.tensor(
        [[-1.0, -1.2, -1.2, -e(-1.0)], [1.0, e(0.5), e(2.0), 0.8]], dtype=torch.float64))
    # dual clip c = 3 caps the A < 0 row at 3 * |A| = 3: only the e^2 = 7.39 token changes
    dual = policy_loss(logp, logp_old, adv, mask, dual_clip=3.0)
    torch.testing.assert_close(dual, torch.tensor(
        [[-1.0, -1.2, -1.2, -e(-1.0)], [1.0, e(0.5), 3.0, 0.8]], dtype=torch.float64))
    # c = 1.4 (published MARS code), A = -2: 2*e^0.5 = 3.30 and 2*e^2 are capped at 2.8
    dual = policy_loss(logp, logp_old, adv * 2, mask, dual_clip=1.4)
    torch.testing.assert_close(dual[1], torch.tensor(
        [2.0, 2.8, 2.8, 1.6], dtype=torch.float64))


def test_policy_loss_per_token_advantages_equal_broadcast():
    logp, logp_old, _, adv, mask = random_batch(5)
    per_seq = policy_loss(logp, logp_old, adv, mask)
    per_tok = policy_loss(logp, logp_old, adv[:, None].expand_as(logp).clone(), mask)
    torch.testing.assert_close(per_seq, per_tok)


def test_policy_loss_zero_on_padding_and_bad_dual_clip():
    logp, logp_old, _, adv, mask = random_batch(3)
    out = policy_loss(logp, logp_old, adv, mask)
    assert torch.all(out[mask == 0] == 0)
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(logp, logp_old, adv, mask, dual_clip=0.5)


def test_clipped_tokens_get_no_gradient():
    # rho = e^0.5 > 1.2 with A > 0, and rho = e^-1 < 0.8 with A < 0: clipped, zero gradient;
    # rho = 1 tokens are inside the trust region and get d/dlogp = -A.
    logp = torch.tensor([[0.5, 0.0], [-1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([2.0, -3.0], dtype=torch.float64)
    policy_loss(logp, torch.zeros(2, 2, dtype=torch.float64), adv, torch.ones(2, 2)).sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -2.0], [0.0, 3.0]], dtype=torch.float64))


# ------------------------------------------------------------------------------ k3 KL


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k3_matches_loop_and_is_nonnegative(seed):
    logp, _, logp_ref, _, _ = random_batch(seed, scale=2.0)
    got = kl_k3(logp, logp_ref)
    assert torch.all(got >= 0)
    for b in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            q = float(logp_ref[b, t]) - float(logp[b, t])
            assert float(got[b, t]) == pytest.approx(math.exp(q) - q - 1, rel=1e-12, abs=1e-15)


def test_k3_zero_when_equal():
    logp, *_ = random_batch(1)
    assert torch.all(kl_k3(logp, logp.clone()) == 0)


def test_k3_hand_value():
    # q = log(2): 2 - log 2 - 1
    got = kl_k3(torch.tensor([[0.0]]), torch.tensor([[math.log(2.0)]]))
    assert float(got) == pytest.approx(1.0 - math.log(2.0), rel=1e-6)


# ------------------------------------------------------------------------------ masked mean


def test_masked_seq_mean_ignores_padding_and_empty_sequences():
    x = torch.tensor([[1.0, 3.0, 1e9], [4.0, 1e9, 1e9], [1e9, 1e9, 1e9]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    out = masked_seq_mean(x, mask)
    assert float(out.detach()) == pytest.approx((2.0 + 4.0) / 2)  # seq means 2 and 4; empty row ignored
    out.backward()
    torch.testing.assert_close(x.grad, torch.tensor([[0.25, 0.25, 0.0], [0.5, 0.0, 0.0], [0.0] * 3]))


def test_masked_seq_mean_weights_sequences_equally():
    # token mean would be (1+1+1+1+9)/5 = 2.6; sequence mean is (1 + 9) / 2 = 5
    x = torch.tensor([[1.0, 1.0, 1.0, 1.0], [9.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    assert float(masked_seq_mean(x, mask)) == pytest.approx(5.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masked_seq_mean_matches_loop(seed):
    logp, _, _, _, mask = random_batch(seed)
    assert float(masked_seq_mean(logp, mask)) == pytest.approx(loop_seq_mean(logp, mask), rel=1e-12)


def test_masked_seq_mean_all_empty_is_zero_with_grad():
    x = torch.randn(3, 4, requires_grad=True)
    out = masked_seq_mean(x, torch.zeros(3, 4))
    assert float(out.detach()) == 0.0 and out.requires_grad
    out.backward()
    assert torch.all(x.grad == 0)


# ------------------------------------------------------------------------------ objective


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_ppo_objective_matches_loop(seed, dual_clip):
    logp, logp_old, logp_ref, adv, mask = random_batch(seed)
    loss, metrics = ppo_objective(logp, logp_old, logp_ref, adv, mask, dual_clip=dual_clip, kl_coef=0.2)
    pg = loop_seq_mean(loop_policy_loss(logp, logp_old, adv, mask, 0.2, dual_clip), mask)
    q = logp_ref - logp
    kl = loop_seq_mean(torch.exp(q) - q - 1, mask)
    assert float(loss) == pytest.approx(pg + 0.2 * kl, rel=1e-10)
    assert metrics["pg_loss"] == pytest.approx(pg, rel=1e-10)
    assert metrics["kl"] == pytest.approx(kl, rel=1e-10)
    assert set(metrics) == {"pg_loss", "kl", "entropy", "clip_frac", "ratio_mean",
                            "approx_kl_old", "ratio_max"}
    assert math.isnan(metrics["entropy"])  # not given: not measured, and not reported as 0
    ratio = [math.exp(float(a - b)) for a, b, m in zip(logp.flatten(), logp_old.flatten(),
                                                        mask.flatten()) if m]
    assert metrics["ratio_max"] == pytest.approx(max(ratio), rel=1e-10)
    assert metrics["approx_kl_old"] == pytest.approx(
        sum(r - 1 - math.log(r) for r in ratio) / len(ratio), rel=1e-6)
    assert all(isinstance(v, float) for v in metrics.values())


def test_ppo_objective_metrics_by_hand():
    # tokens (rho, A): (1, +1) not clipped, (e^0.5, +1) clipped, (e^2, -1) not clipped
    # (max(-rho*A, -1.2*A) picks rho), padding ignored -> clip_frac 1/3
    logp = torch.tensor([[0.0, 0.5, 9.0], [2.0, 9.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss, m = ppo_objective(logp, torch.zeros_like(logp), None, adv, mask, kl_coef=0.0)
    assert m["clip_frac"] == pytest.approx(1 / 3)
    assert m["ratio_mean"] == pytest.approx((1 + math.exp(0.5) + math.exp(2.0)) / 3)
    assert m["kl"] == 0.0
    # seq 0: (-1 - 1.2) / 2 = -1.1; seq 1: e^2 -> mean over sequences
    assert float(loss) == pytest.approx((-1.1 + math.exp(2.0)) / 2)


def test_ppo_objective_requires_reference_when_kl_on():
    logp, logp_old, _, adv, mask = random_batch(0)
    with pytest.raises(ValueError, match="logp_ref"):
        ppo_objective(logp, logp_old, None, adv, mask, kl_coef=0.2)


def test_gradient_flows_through_logp_only():
    logp, logp_old, logp_ref, adv, mask = random_batch(4)
    logp, logp_old, logp_ref, adv = (t.clone().requires_grad_(True) for t in (logp, logp_old, logp_ref, adv))
    loss, _ = ppo_objective(logp, logp_old, logp_ref, adv, mask, dual_clip=3.0)
    loss.backward()
    assert logp.grad is not None and logp.grad.abs().sum() > 0
    assert torch.all(logp.grad[mask == 0] == 0)
    assert logp_old.grad is None and logp_ref.grad is None and adv.grad is None


def test_bf16_inputs_are_computed_in_float32():
    logp, logp_old, logp_ref, adv, mask = random_batch(2)
    loss, _ = ppo_objective(logp.bfloat16(), logp_old.bfloat16(), logp_ref.bfloat16(), adv, mask)
    assert loss.dtype == torch.float32


# ------------------------------------------------------------------------------ aggregation

# lengths 3, 1, 0: sequence sums 9 and 4, means 3 and 4, 4 tokens in all
AGG_X = [[1.0, 3.0, 5.0], [4.0, float("nan"), 1e9], [1e9, 1e9, float("inf")]]
AGG_MASK = [[1, 1, 1], [1, 0, 0], [0, 0, 0]]
AGG_HAND = {  # mode: (value, denominator, d value / d x on the masked tokens)
    "seq_mean_token_mean": ((3.0 + 4.0) / 2, 2.0, [[1 / 6] * 3, [1 / 2, 0, 0]]),
    "token_mean": (13.0 / 4, 4.0, [[1 / 4] * 3, [1 / 4, 0, 0]]),
    "seq_mean_token_sum": ((9.0 + 4.0) / 2, 2.0, [[1 / 2] * 3, [1 / 2, 0, 0]]),
}


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_aggregate_by_hand(mode):
    x = torch.tensor(AGG_X, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor(AGG_MASK)
    value, denom, grad = AGG_HAND[mode]
    out = aggregate(x, mask, mode)
    assert float(out.detach()) == pytest.approx(value, rel=1e-12)
    assert aggregate_denominator(mask, mode) == denom
    out.backward()  # padding (nan, inf, 1e9) never reaches the value or the gradient
    torch.testing.assert_close(x.grad, torch.tensor(grad + [[0.0] * 3], dtype=torch.float64))


def test_aggregation_modes_differ_on_unequal_lengths():
    x, mask = torch.tensor(AGG_X), torch.tensor(AGG_MASK)
    values = {m: float(aggregate(x, mask, m)) for m in AGGREGATIONS}
    assert len(set(values.values())) == 3
    assert float(masked_seq_mean(x, mask)) == values["seq_mean_token_mean"]


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chunks_with_the_batch_denominator_add_up_to_the_batch(mode, seed):
    logp, *_, mask = random_batch(seed, B=7)
    whole = aggregate(logp, mask, mode)
    denom = aggregate_denominator(mask, mode)
    for bounds in ([0, 1, 4, 7], [0, 2, 3, 5, 7], list(range(8))):
        parts = [aggregate(logp[a:b], mask[a:b], mode, denominator=denom)
                 for a, b in zip(bounds, bounds[1:])]
        assert float(sum(parts)) == pytest.approx(float(whole), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_ppo_objective_chunks_add_up_with_gradients(mode):
    logp, logp_old, logp_ref, adv, mask = random_batch(7, B=8)
    ent = torch.rand(8, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def run(rows, denom):
        lp = logp[rows].clone().requires_grad_(True)
        e = ent[rows].clone().requires_grad_(True)
        loss, m = ppo_objective(lp, logp_old[rows], logp_ref[rows], adv[rows], mask[rows],
                                dual_clip=3.0, kl_coef=0.2, entropy=e, entropy_coef=0.05,
                                aggregation=mode, denominator=denom)
        loss.backward()
        return float(loss.detach()), m, lp.grad, e.grad

    loss, m, g_lp, g_e = run(slice(0, 8), None)
    denom = aggregate_denominator(mask, mode)
    parts = [run(slice(i, i + 1), denom) for i in range(8)]
    assert sum(p[0] for p in parts) == pytest.approx(loss, rel=1e-12)
    for key in ("pg_loss", "kl", "entropy"):
        assert sum(p[1][key] for p in parts) == pytest.approx(m[key], rel=1e-12)
    torch.testing.assert_close(torch.cat([p[2] for p in parts]), g_lp)
    torch.testing.assert_close(torch.cat([p[3] for p in parts]), g_e)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_aggregate_all_empty_is_zero_with_grad(mode):
    x = torch.randn(3, 4, requires_grad=True)
    mask = torch.zeros(3, 4)
    assert aggregate_denominator(mask, mode) == 0.0
    for denom in (None, 0.0, 5.0):
        out = aggregate(x, mask, mode, denominator=denom)
        assert float(out.detach()) == 0.0 and out.requires_grad
        out.backward()
    assert torch.all(x.grad == 0)


def test_aggregate_rejects_bad_mode_and_denominator():
    x, mask = torch.ones(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(x, mask, "seq_sum")
    with pytest.raises(ValueError, match="aggregation"):
        aggregate_denominator(mask, "token_sum")
    with pytest.raises(ValueError, match="denominator"):
        aggregate(x, mask, "token_mean", denominator=-1.0)
    with pytest.raises(ValueError, match="aggregation"):
        ppo_objective(x, x, None, torch.ones(2), mask, kl_coef=0.0, aggregation="mean")


# ------------------------------------------------------------------------------ entropy, no KL


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_entropy_bonus_lowers_the_loss_by_coef_times_entropy(mode):
    logp, logp_old, logp_ref, adv, mask = random_batch(3)
    ent = torch.rand(logp.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    base, m0 = ppo_objective(logp, logp_old, logp_ref, adv, mask, aggregation=mode)
    e = ent.clone().requires_grad_(True)
    loss, m = ppo_objective(logp, logp_old, logp_ref, adv, mask, entropy=e, entropy_coef=0.1,
                            aggregation=mode)
    h = float(aggregate(ent, mask, mode))
    assert h > 0 and m["entropy"] == pytest.approx(h, rel=1e-12)
    assert float(loss.detach()) == pytest.approx(float(base) - 0.1 * h, rel=1e-12)
    assert m["pg_loss"] == m0["pg_loss"] and m["kl"] == m0["kl"]
    loss.backward()  # gradient of -coef * aggregate(entropy): raising entropy lowers the loss
    h_grad = torch.autograd.functional.jacobian(lambda t: aggregate(t, mask, mode), ent)
    torch.testing.assert_close(e.grad, -0.1 * h_grad)


def test_entropy_required_when_its_coefficient_is_on():
    logp, logp_old, logp_ref, adv, mask = random_batch(0)
    with pytest.raises(ValueError, match="entropy"):
        ppo_objective(logp, logp_old, logp_ref, adv, mask, entropy_coef=0.01)
    with pytest.raises(ValueError, match="entropy_coef"):
        ppo_objective(logp, logp_old, logp_ref, adv, mask, entropy=logp, entropy_coef=-0.1)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_ppo_objective_without_kl_needs_no_reference(mode):
    logp, logp_old, _, adv, mask = random_batch(1)
    loss, m = ppo_objective(logp, logp_old, None, adv, mask, dual_clip=1.4, kl_coef=0.0,
                            aggregation=mode)
    want = aggregate(policy_loss(logp, logp_old, adv, mask, dual_clip=1.4), mask, mode)
    assert float(loss) == pytest.approx(float(want), rel=1e-12)
    assert m["kl"] == 0.0 and math.isnan(m["entropy"]) and m["pg_loss"] == pytest.approx(float(want))


def test_the_config_offers_the_aggregation_modes_of_the_loss():
    from typing import get_args

    from mars_core.config.train import AlgorithmConfig

    assert get_args(AlgorithmConfig.model_fields["loss_aggregation"].annotation) == AGGREGATIONS
