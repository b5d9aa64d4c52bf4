"""The policy update: sequence log-probs, one PPO epoch over a batch of turns, warm-up SFT.

The trainer does not know which estimator produced the advantages: it receives samples
(prompt ids, completion ids, advantage) and applies the clipped objective with the k3 KL
penalty to a frozen reference model (SPEC section 4).
"""
from __future__ import annotations

import math
import random
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from mars_core.config import AlgorithmConfig, OptimConfig
from mars_core.losses import ppo_objective


@dataclass(frozen=True)
class Sample:
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    advantage: float
    game: str = ""  # minibatches are split evenly by game


def bf16_supported() -> bool:
    """True where the CPU has native bf16 (AVX512-BF16 or AMX) or a CUDA device is used."""
    if torch.cuda.is_available():
        return True
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def autocast(enabled: bool, device: str = "cpu"):
    return torch.autocast(device, dtype=torch.bfloat16) if enabled else nullcontext()


def _left_pad(samples: list[Sample], pad_id: int):
    seqs = [list(s.prompt_ids) + list(s.completion_ids) for s in samples]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s)
        attn[i, width - len(s):] = 1
    return ids, attn


def sequence_logprobs(model, samples: list[Sample], temperature: float, pad_id: int,
                      bf16: bool = False):
    """Log-probs of each sample's completion tokens under softmax(logits / temperature).

    Sequences are left-padded so that every completion ends at the last position; only the
    last `max_completion + 1` positions go through the LM head (`logits_to_keep`), which keeps
    memory proportional to the completion, not the prompt. Returns (logp, mask), both [B, C]
    with C = the longest completion; mask is 1 on real completion tokens (right-aligned).
    """
    device = next(model.parameters()).device
    ids, attn = _left_pad(samples, pad_id)
    ids, attn = ids.to(device), attn.to(device)
    c = max(len(s.completion_ids) for s in samples)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    with autocast(bf16, device.type):
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos,
                       logits_to_keep=c + 1).logits[:, :-1].float()
    t = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / t, dim=-1).gather(-1, ids[:, -c:].unsqueeze(-1)).squeeze(-1)
    lengths = torch.tensor([len(s.completion_ids) for s in samples], device=device)
    mask = (torch.arange(c, device=device).unsqueeze(0) >= (c - lengths).unsqueeze(1)).float()
    return logp, mask


def make_optimizer(model, cfg: OptimConfig, total_steps: int):
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas),
                            weight_decay=cfg.weight_decay)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup_steps, total_steps))


def lr_lambda(warmup: int, total: int):
    """Linear warm-up for `warmup` steps, then cosine decay to 0 at `total` steps."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return f


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _logps_no_grad(model, samples, temperature, pad_id, micro, bf16) -> list[torch.Tensor]:
    with torch.no_grad():
        return [sequence_logprobs(model, chunk, temperature, pad_id, bf16)[0]
                for chunk in _chunks(samples, micro)]


def ppo_update(model, ref_model, optimizer, scheduler, samples: list[Sample],
               algo: AlgorithmConfig, optim: OptimConfig, *, temperature: float, pad_id: int,
               seed: int, bf16: bool = False, progress: bool = True) -> dict[str, float]:
    """One PPO epoch: `optim.minibatches` optimizer steps over the shuffled samples, each
    accumulated over micro-batches so that the update equals one big batch's. Minibatches are
    dealt round-robin from the samples grouped by game, so every optimizer step sees the games
    in equal shares (the generalist). Returns the mean of each metric over optimizer steps
    (loss, kl, clip_frac, grad_norm, lr, ...)."""
    order = list(range(len(samples)))
    random.Random(seed).shuffle(order)
    samples = sorted((samples[i] for i in order), key=lambda s: s.game)  # stable: still shuffled
    n_mb = min(optim.minibatches, len(samples))
    minibatches = [samples[i::n_mb] for i in range(n_mb)]
    micro = optim.micro_batch_size
    # Old log-probs are needed only when the policy moves between minibatches.
    olds = [_logps_no_grad(model, mb, temperature, pad_id, micro, bf16)
            for mb in minibatches] if len(minibatches) > 1 else None
    totals: dict[str, float] = {}
    model.train()
    bar = tqdm(total=sum(len(_chunks(mb, micro)) for mb in minibatches), desc="train",
               unit="micro", disable=not progress, leave=False)
    for i, mb in enumerate(minibatches):
        refs = (_logps_no_grad(ref_model, mb, temperature, pad_id, micro, bf16)
                if algo.kl_coef > 0 else None)
        optimizer.zero_grad(set_to_none=True)
        step_metrics: dict[str, float] = {}
        for j, chunk in enumerate(_chunks(mb, micro)):
            logp, mask = sequence_logprobs(model, chunk, temperature, pad_id, bf16)
            old = olds[i][j] if olds else logp.detach()
            adv = torch.tensor([s.advantage for s in chunk], dtype=logp.dtype, device=logp.device)
            loss, m = ppo_objective(logp, old, refs[j] if refs else None, adv, mask,
                                    clip_eps=algo.clip_eps, dual_clip=algo.dual_clip,
                                    kl_coef=algo.kl_coef)
            weight = len(chunk) / len(mb)
            (loss * weight).backward()
            m["loss"] = float(loss.detach())
            for k, v in m.items():
                step_metrics[k] = step_metrics.get(k, 0.0) + weight * v
            bar.update(1)
        step_metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), optim.grad_clip))
        step_metrics["lr"] = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        for k, v in step_metrics.items():
            totals[k] = totals.get(k, 0.0) + v / len(minibatches)
    bar.close()
    model.eval()
    totals["samples"] = float(len(samples))
    return totals


def sft_steps(model, examples: list[tuple[list[int], list[int]]], *, steps: int, batch_size: int,
              lr: float, pad_id: int, seed: int, bf16: bool = False, progress: bool = True) -> list[float]:
    """Supervised steps on (prompt ids, target ids): cross-entropy on the target tokens only.
    Used for the format warm-up. Returns the loss of each step."""
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    losses = []
    for _ in tqdm(range(steps), desc="warm-up", unit="step", disable=not progress, leave=False):
        batch = [Sample(tuple(p), tuple(t), 0.0) for p, t in rng.sample(examples, min(batch_size, len(examples)))]
        logp, mask = sequence_logprobs(model, batch, 1.0, pad_id, bf16)
        loss = -((logp * mask).sum(-1) / mask.sum(-1)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses
