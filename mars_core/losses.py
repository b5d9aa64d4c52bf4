"""PPO-style policy loss and k3 KL penalty (MARS settings), as pure tensor functions.

Shapes: B sequences (one per turn completion) padded to T tokens. `mask` [B, T] is 1 on
completion tokens and 0 on prompt and padding tokens. Advantages come one per sequence [B]
(broadcast to its tokens) or already per token [B, T]; the loss does not know which estimator
produced them.

Only `logp` carries gradient: `logp_old`, `logp_ref` and `advantages` are detached here, so a
caller cannot leak gradient into the sampler's or the reference model's numbers by mistake.
Arithmetic runs in at least float32 (bf16 ratios are too coarse for the clip test).
"""
from __future__ import annotations

import torch

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
) -> Tensor:
    """Per-token clipped surrogate loss.

    rho = exp(logp - logp_old); L = -min(rho * A, clip(rho, 1 - eps, 1 + eps) * A).
    Dual clip (c > 1): where A < 0 the loss is capped at c * |A|, i.e. L = min(L, -c * A), so a
    token whose ratio exploded on a negative advantage cannot dominate the batch.

    Args: logp, logp_old, mask [B, T]; advantages [B] or [B, T].
    Returns: loss [B, T], zero where mask is 0 (reduce it with `masked_seq_mean`).
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    dtype = _compute_dtype(logp)
    logp = logp.to(dtype)
    adv = _per_token(advantages, logp)
    ratio = torch.exp(logp - logp_old.detach().to(dtype))
    unclipped = -ratio * adv
    clipped = -torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    loss = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -dual_clip * adv), loss)
    return torch.where(mask.bool(), loss, torch.zeros_like(loss))


def kl_k3(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref): exp(q) - q - 1 with q = logp_ref - logp.

    Unbiased for the KL under samples from pi, and >= 0 everywhere (0 iff logp == logp_ref).
    Args: logp, logp_ref [B, T]. Returns: [B, T]; gradient flows through `logp` only.
    """
    dtype = _compute_dtype(logp)
    q = logp_ref.detach().to(dtype) - logp.to(dtype)
    return torch.exp(q) - q - 1.0


def masked_seq_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean over each sequence's masked tokens, then mean over sequences.

    Every sequence weighs the same whatever its length (the MARS "seq-mean-token-mean").
    Sequences with no masked token are left out; if all are empty the result is 0 and still
    part of the graph, so `backward()` works and gives zero gradients.
    Args: x, mask [B, T]. Returns: scalar.
    """
    keep = mask.bool()
    total = torch.where(keep, x, torch.zeros_like(x)).sum(dim=-1)
    count = keep.sum(dim=-1)
    per_seq = total / count.clamp(min=1).to(total.dtype)
    has_tokens = (count > 0).to(total.dtype)
    return (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)


def _token_mean(x: Tensor, mask: Tensor) -> float:
    """Mean of x over all masked tokens of the batch, as a python float (0 if none)."""
    keep = mask.bool()
    n = int(keep.sum())
    return float(x.detach()[keep].float().sum()) / n if n else 0.0


def ppo_objective(
    logp: Tensor,
    logp_old: Tensor,
    logp_ref: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    dual_clip: float | None = None,
    kl_coef: float = 0.2,
) -> tuple[Tensor, dict[str, float]]:
    """The MARS training loss: seq-mean-token-mean of the clipped surrogate plus
    `kl_coef` x seq-mean-token-mean of k3 KL to the reference policy.

    Args: logp, logp_old, mask [B, T]; logp_ref [B, T] or None (allowed only when
    kl_coef == 0); advantages [B] or [B, T].
    Returns: (loss scalar, metrics) with metrics pg_loss, kl (0.0 without a reference),
    clip_frac (share of completion tokens where the clipped term was the active one) and
    ratio_mean (mean ratio over completion tokens), all python floats.
    """
    if logp_ref is None and kl_coef != 0:
        raise ValueError("logp_ref is required when kl_coef != 0")
    pg = policy_loss(logp, logp_old, advantages, mask, clip_eps=clip_eps, dual_clip=dual_clip)
    pg_loss = masked_seq_mean(pg, mask)
    kl = masked_seq_mean(kl_k3(logp, logp_ref), mask) if logp_ref is not None else None
    loss = pg_loss + kl_coef * kl if (kl is not None and kl_coef != 0) else pg_loss
    with torch.no_grad():
        dtype = _compute_dtype(logp)
        ratio = torch.exp(logp.to(dtype) - logp_old.to(dtype))
        adv = _per_token(advantages, ratio)
        clipped = -torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv > -ratio * adv
        metrics = {
            "pg_loss": float(pg_loss.detach()),
            "kl": float(kl.detach()) if kl is not None else 0.0,
            "clip_frac": _token_mean(clipped.to(dtype), mask),
            "ratio_mean": _token_mean(ratio, mask),
        }
    return loss, metrics
