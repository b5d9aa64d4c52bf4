"""PPO-style policy loss, k3 KL penalty and entropy bonus (MARS settings), as pure tensor
functions, with the token aggregation modes.

Shapes: B sequences (one per turn completion) padded to T tokens. `mask` [B, T] is 1 on
completion tokens and 0 on prompt and padding tokens. Advantages come one per sequence [B]
(broadcast to its tokens) or already per token [B, T]; the loss does not know which estimator
produced them.

Only `logp` (and `entropy`, a function of the same policy) carries gradient: `logp_old`,
`logp_ref` and `advantages` are detached here, so a caller cannot leak gradient into the
sampler's or the reference model's numbers by mistake.
Arithmetic runs in at least float32 (bf16 ratios are too coarse for the clip test).
"""
from __future__ import annotations

import torch

from mars_core.config.train import AGGREGATIONS  # noqa: F401  (re-exported)

Tensor = torch.Tensor


def _compute_dtype(x: Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def _per_token(advantages: Tensor, like: Tensor) -> Tensor:
    """Advantages [B] or [B, T] -> [B, T], detached, in `like`'s dtype."""
    adv = advantages.detach().to(like.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    return adv.expand_as(like)


def policy_loss(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    dual_clip: float | None = None,
    clip_eps_high: float | None = None,
    weights: Tensor | None = None,
) -> Tensor:
    """Per-token clipped surrogate loss, with decoupled PPO's importance weight.

    rho = exp(logp - logp_old); L = -w * min(rho * A, clip(rho, 1 - eps, 1 + eps_high) * A).
    `logp_old` is the proximal policy (the weights at the start of the update): the trust
    region is taken around it. `weights` w (detached) correct for the policy that actually
    drew the tokens (the behaviour policy): w = min(pi_old / pi_behaviour, C) per token
    (`importance_weights`); None: w = 1 (on-policy). `clip_eps_high` (DAPO's clip-higher, None:
    eps) lets a token's probability rise further than it may fall, which keeps exploration.
    Dual clip (c > 1): where A < 0 the loss is capped at c * |A|, i.e. L = min(L, -c * A), so a
    token whose ratio exploded on a negative advantage cannot dominate the batch.

    Args: logp, logp_old, mask [B, T]; advantages [B] or [B, T]; weights [B, T] or None.
    Returns: loss [B, T], zero where mask is 0 (reduce it with `aggregate`).
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    dtype = _compute_dtype(logp)
    logp = logp.to(dtype)
    adv = _per_token(advantages, logp)
    ratio = torch.exp(logp - logp_old.detach().to(dtype))
    high = clip_eps if clip_eps_high is None else clip_eps_high
    unclipped = -ratio * adv
    clipped = -torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    loss = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -dual_clip * adv), loss)
    if weights is not None:
        loss = loss * weights.detach().to(dtype)
    return torch.where(mask.bool(), loss, torch.zeros_like(loss))


def likelihood_loss(logp: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Per-token weighted negative log-likelihood, -target * logp: summed over a sequence's
    tokens (`aggregate` mode seq_mean_token_sum) and over a state's answers it is
    -sum_a target(a) log pi(a | s), whose minimum over the answers' probabilities is pi =
    target (the mirror update's fit: no ratio, so no step beyond the target).
    Args: logp, mask [B, T]; targets [B] or [B, T] (>= 0). Returns: [B, T], 0 where mask is 0."""
    dtype = _compute_dtype(logp)
    loss = -_per_token(targets, logp.to(dtype)) * logp.to(dtype)
    return torch.where(mask.bool(), loss, torch.zeros_like(loss))


def importance_weights(logp_old: Tensor, logp_behaviour: Tensor, known: Tensor,
                       cap: float | None) -> Tensor:
    """Decoupled PPO's truncated importance weight per token: min(pi_old / pi_behaviour, cap),
    pi_old the proximal policy (recomputed at the start of the update), pi_behaviour the
    probability the engine recorded when it sampled the token (an older policy for a bank
    turn drawn again, another kernel or precision for vLLM or bf16, a truncated distribution
    for top-k/top-p). 1 where the behaviour is unknown (`known` 0: a scripted reply) or
    `cap` is None (correction off).
    Args: logp_old, logp_behaviour, known [B, T]. Returns: [B, T], detached, float32+."""
    dtype = _compute_dtype(logp_old)
    if cap is None:
        return torch.ones_like(logp_old, dtype=dtype)
    w = torch.exp(logp_old.detach().to(dtype) - logp_behaviour.detach().to(dtype)).clamp(max=cap)
    return torch.where(known.bool(), w, torch.ones_like(w))


def kl_k3(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref): exp(q) - q - 1 with q = logp_ref - logp.

    Unbiased for the KL under samples from pi, and >= 0 everywhere (0 iff logp == logp_ref).
    Args: logp, logp_ref [B, T]. Returns: [B, T]; gradient flows through `logp` only.
    """
    dtype = _compute_dtype(logp)
    q = logp_ref.detach().to(dtype) - logp.to(dtype)
    return torch.exp(q) - q - 1.0


def _check_mode(mode: str) -> None:
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; choose one of: " + ", ".join(AGGREGATIONS))


def aggregate_denominator(mask: Tensor, mode: str) -> float:
    """The normaliser D of `aggregate` for this mask: the number of masked tokens
    (token_mean) or of sequences with at least one masked token (the two seq modes).
    Args: mask [B, T]. Returns: a python float (0.0 for an all-empty mask)."""
    _check_mode(mode)
    keep = mask.bool()
    if mode == "token_mean":
        return float(keep.sum())
    return float((keep.sum(dim=-1) > 0).sum())


def aggregate(x: Tensor, mask: Tensor, mode: str = "seq_mean_token_mean",
              denominator: float | None = None) -> Tensor:
    """Reduce per-token values to one number, as a sum over a normaliser D:

    - seq_mean_token_mean: sum_s mean_{t in s} x[s, t] / D, D = #sequences with >= 1 token
      (MARS: every sequence weighs the same whatever its length);
    - token_mean: sum_{s, t} x[s, t] / D, D = #masked tokens (every token weighs the same);
    - seq_mean_token_sum: sum_s sum_{t in s} x[s, t] / D, D = #sequences with >= 1 token.

    With `denominator=None`, D comes from this mask (a standalone mean). Passing the D of a
    whole minibatch makes the values of its chunks add up exactly to the whole-minibatch
    value, which is what gradient accumulation needs. Positions where mask is 0 never count
    (even if x is inf/nan there); empty sequences are left out; D = 0 gives 0, still part of
    the graph so `backward()` works and gives zero gradients.
    Args: x, mask [B, T]. Returns: scalar in at least float32.
    """
    _check_mode(mode)
    if denominator is not None and not denominator >= 0:
        raise ValueError(f"aggregation denominator must be >= 0, got {denominator}")
    keep = mask.bool()
    x = x.to(_compute_dtype(x))
    per_seq = torch.where(keep, x, torch.zeros_like(x)).sum(dim=-1)
    if mode == "seq_mean_token_mean":
        per_seq = per_seq / keep.sum(dim=-1).clamp(min=1).to(per_seq.dtype)
    d = aggregate_denominator(mask, mode) if denominator is None else float(denominator)
    return per_seq.sum() / max(d, 1.0)


def masked_seq_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean over each sequence's masked tokens, then mean over sequences: `aggregate` in mode
    seq_mean_token_mean with this mask's own denominator (kept for callers and tests).
    Args: x, mask [B, T]. Returns: scalar."""
    return aggregate(x, mask, "seq_mean_token_mean")


def _token_mean(x: Tensor, mask: Tensor) -> float:
    """Mean of x over all masked tokens of the batch, as a python float (0 if none)."""
    keep = mask.bool()
    n = int(keep.sum())
    return float(x.detach()[keep].float().sum()) / n if n else 0.0


def _check_terms(logp_ref, kl_coef: float, entropy, entropy_coef: float) -> None:
    if logp_ref is None and kl_coef != 0:
        raise ValueError("logp_ref is required when kl_coef != 0")
    if entropy_coef < 0:
        raise ValueError(f"entropy_coef must be >= 0, got {entropy_coef}")
    if entropy is None and entropy_coef != 0:
        raise ValueError("entropy is required when entropy_coef != 0")


def ppo_objective(
    logp: Tensor,
    logp_old: Tensor,
    logp_ref: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    dual_clip: float | None = None,
    kl_coef: float = 0.2,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    aggregation: str = "seq_mean_token_mean",
    denominator: float | None = None,
    clip_eps_high: float | None = None,
    weights: Tensor | None = None,
    surrogate: str = "clipped",
) -> tuple[Tensor, dict[str, float]]:
    """The training loss: loss = pg + kl_coef * kl - entropy_coef * entropy, each term the
    `aggregate` (mode `aggregation`, normaliser `denominator`) of its per-token values: the
    clipped surrogate (importance-weighted by `weights`, see `policy_loss`), the k3 KL to the
    reference policy and the policy's token entropy.
    MARS: seq_mean_token_mean, kl_coef 0.2, entropy_coef 0. `surrogate` "likelihood" replaces
    the clipped surrogate by `likelihood_loss` (the advantages are target probabilities: the
    mirror update); the ratio metrics are measured the same way.

    Args: logp, logp_old, mask [B, T]; logp_ref [B, T] or None (allowed only when
    kl_coef == 0); advantages [B] or [B, T]; entropy [B, T] or None (allowed only when
    entropy_coef == 0; it may be detached when its coefficient is 0: measured, not trained);
    denominator: see `aggregate` (None: this batch's own); weights [B, T] or None.
    Returns: (loss scalar, metrics), python floats: pg_loss, kl (0.0 without a reference),
    entropy (NaN when not given: not measured), and the token means clip_frac (share of
    completion tokens where the clipped term was the active one), ratio_mean, approx_kl_old
    (k3 estimate of KL(pi_old || pi), how far the update has moved from the proximal policy)
    and ratio_max.
    With a shared denominator, loss/pg_loss/kl/entropy are this chunk's share of the
    minibatch value (they add up over chunks); the token means are this chunk's means.
    """
    _check_terms(logp_ref, kl_coef, entropy, entropy_coef)

    def agg(x: Tensor) -> Tensor:
        return aggregate(x, mask, aggregation, denominator)

    if surrogate == "likelihood":
        pg_loss = agg(likelihood_loss(logp, advantages, mask))
    elif surrogate == "clipped":
        pg_loss = agg(policy_loss(logp, logp_old, advantages, mask, clip_eps=clip_eps,
                                  dual_clip=dual_clip, clip_eps_high=clip_eps_high,
                                  weights=weights))
    else:
        raise ValueError(f"unknown surrogate {surrogate!r}; choose clipped or likelihood")
    kl = agg(kl_k3(logp, logp_ref)) if logp_ref is not None else None
    ent = agg(entropy) if entropy is not None else None
    loss = pg_loss
    if kl is not None and kl_coef != 0:
        loss = loss + kl_coef * kl
    if ent is not None and entropy_coef != 0:
        loss = loss - entropy_coef * ent
    with torch.no_grad():
        dtype = _compute_dtype(logp)
        log_ratio = logp.to(dtype) - logp_old.to(dtype)
        ratio = torch.exp(log_ratio)
        adv = _per_token(advantages, ratio)
        high = clip_eps if clip_eps_high is None else clip_eps_high
        clipped = -torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv > -ratio * adv
        keep = mask.bool()
        metrics = {
            "pg_loss": float(pg_loss.detach()),
            "kl": float(kl.detach()) if kl is not None else 0.0,
            "entropy": float(ent.detach()) if ent is not None else float("nan"),
            "clip_frac": _token_mean(clipped.to(dtype), mask),
            "ratio_mean": _token_mean(ratio, mask),
            "approx_kl_old": _token_mean(ratio - 1.0 - log_ratio, mask),
            "ratio_max": float(ratio[keep].max()) if bool(keep.any()) else 1.0,
        }
    return loss, metrics


def behaviour_metrics(old: Tensor, behaviour: Tensor, known: Tensor, w: Tensor, mask: Tensor,
                      cap: float | None) -> dict[str, float]:
    """The engine/trainer gap on the tokens whose behaviour is known: the mean of
    log pi_old - log pi_behaviour (signed and absolute), and the importance weights (mean, max,
    share truncated at the cap), as means over the chunk's tokens (`mask`) so that the
    trainer can weigh chunks by their tokens. With no known token: gap 0, weights 1.
    Args: old, behaviour, known, w, mask [B, T]."""
    with torch.no_grad():
        k = known.bool()
        n = int(k.sum())
        if not n:
            return {"behaviour_gap": 0.0, "behaviour_gap_abs": 0.0, "is_weight_mean": 1.0,
                    "is_capped_frac": 0.0, "is_weight_max": 1.0}
        gap = (old.float() - behaviour.float())[k]
        frac = n / max(1, int(mask.bool().sum()))  # token means over the chunk's tokens
        wk = w[k].float()
        return {"behaviour_gap": float(gap.mean()) * frac,
                "behaviour_gap_abs": float(gap.abs().mean()) * frac,
                "is_weight_mean": float(w[mask.bool()].float().mean()),
                "is_capped_frac": (float((gap.exp() > cap).float().mean()) * frac
                                   if cap is not None else 0.0),
                "is_weight_max": float(wk.max())}
