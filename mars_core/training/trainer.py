"""The policy update: sequence log-probs, PPO epochs over a batch of turns, warm-up SFT.

The trainer does not know which estimator produced the advantages: it receives samples
(prompt ids, completion ids, advantage, the temperature the completion was sampled at) and
applies the clipped objective with the k3 KL penalty to a frozen reference model and an
optional entropy bonus (SPEC section 4). Log-probs are taken under each sample's own sampling
temperature, so a game sampled at 1.0 (In2AI's Blotto) is trained at 1.0, not at the run's
default. A prompt prefix that the samples of a forward pass share (a game's rules text) goes
through the model once (`mars_core.models.prefix`), and samples with the same sequence share
one row of a forward pass (`mars_core.training.chunks`).
"""
from __future__ import annotations

import math
import random
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from mars_core.config import AlgorithmConfig, OptimConfig
from mars_core.run.layout import COMPUTE_ADVANTAGES
from mars_core.run.memory import trim_malloc
from mars_core.training.losses import (aggregate_denominator, behaviour_metrics, importance_weights,
                                       ppo_objective)
from mars_core.models.prefix import batch_forward, enable_gradient_checkpointing  # noqa: F401
from mars_core.training.chunks import chunks as _chunks, distinct_chunks, rank_chunks, rows_of


@dataclass(frozen=True)
class Sample:
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    advantage: float
    game: str = ""  # minibatches are split evenly by game
    # the temperature the completion was sampled at: its log-probs are taken under the same
    # softmax(logits / temperature) the engine drew from (0, greedy: the untempered softmax)
    temperature: float = 1.0
    # each completion token's log-prob under the distribution the engine sampled it from (the
    # behaviour policy); () when unknown (a scripted reply): importance weight 1
    behaviour: tuple[float, ...] = ()


SAMPLE_COLUMNS = ("prompt_ids", "completion_ids", "advantage", "game", "temperature")


def load_samples(path) -> list[Sample]:
    """A batch parquet's samples; without `logprobs` their behaviour is unknown (weight 1)."""
    import polars as pl

    frame = pl.read_parquet(path)
    missing = [c for c in SAMPLE_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"samples file {path} has no column {missing[0]!r}: it was written by an "
                         "older version; delete the iteration's stage folders from "
                         f"{COMPUTE_ADVANTAGES} on and resume")
    cols = SAMPLE_COLUMNS + (("logprobs",) if "logprobs" in frame.columns else ())  # behaviour
    return [Sample(tuple(r["prompt_ids"]), tuple(r["completion_ids"]), r["advantage"], r["game"],
                   r["temperature"], tuple(r.get("logprobs") or ()))
            for r in frame.select(cols).iter_rows(named=True)]


@dataclass(frozen=True)
class Forward:
    """How samples go through the model: the padding id, bf16 autocast, whether a prompt
    prefix that several samples share is computed once (`mars_core.models.prefix.batch_forward`),
    whether samples with the same sequence share one row of a forward pass, and the padded
    token positions a forward pass may hold (`mars_core.training.chunks`; None: no bound)."""

    pad_id: int
    bf16: bool = False
    share_prefix: bool = True
    distinct: bool = True
    max_tokens: int | None = None


def autocast(enabled: bool, device: str = "cpu"):
    return torch.autocast(device, dtype=torch.bfloat16) if enabled else nullcontext()


def _last_tokens(seqs: list[list[int]], c: int, pad_id: int) -> torch.Tensor:
    """The last `c` tokens of each sequence, right-aligned ([B, c]; `pad_id` where shorter)."""
    out = torch.full((len(seqs), c), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        tail = s[-c:]
        out[i, c - len(tail):] = torch.tensor(tail, dtype=torch.long)
    return out


def sequence_logprobs(model, samples: list[Sample], fwd: Forward, with_entropy: bool = False,
                      entropy_grad: bool = True):
    """Log-probs of each sample's completion tokens under softmax(logits / T), T the
    temperature the sample was drawn at (1 where that was 0).

    Sequences are left-padded so that every completion ends at the last position; only the
    last `max_completion + 1` positions go through the LM head (`logits_to_keep`), which keeps
    memory proportional to the completion, not the prompt. Returns (logp, mask), both [B, C]
    with C = the longest completion; mask is 1 on real completion tokens (right-aligned), so
    whatever stands at prompt positions never counts.
    With `with_entropy`, returns (logp, mask, entropy): entropy [B, C] is the per-token entropy
    H = -sum_v p_v log p_v of that same tempered softmax (one more pass over the vocabulary),
    with gradient unless `entropy_grad` is False (measured only, no graph kept).
    """
    device = next(model.parameters()).device
    seqs = [list(s.prompt_ids) + list(s.completion_ids) for s in samples]
    c = max(len(s.completion_ids) for s in samples)
    with autocast(fwd.bf16, device.type):
        out = batch_forward(model, seqs, fwd.pad_id, logits_to_keep=c + 1,
                            own=[len(s.completion_ids) + 1 for s in samples],
                            share_prefix=fwd.share_prefix)
    logits = out.logits[:, :-1].float()
    t = torch.tensor([s.temperature if s.temperature > 0 else 1.0 for s in samples],
                     dtype=logits.dtype, device=device)
    log_probs = torch.log_softmax(logits / t.view(-1, 1, 1), dim=-1)
    targets = _last_tokens(seqs, c, fwd.pad_id).to(device)
    logp = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    lengths = torch.tensor([len(s.completion_ids) for s in samples], device=device)
    mask = (torch.arange(c, device=device).unsqueeze(0) >= (c - lengths).unsqueeze(1)).float()
    if not with_entropy:
        return logp, mask
    if not entropy_grad:
        with torch.no_grad():
            lp = log_probs.detach()
            return logp, mask, -(lp.exp() * lp).sum(-1)
    return logp, mask, -(log_probs.exp() * log_probs).sum(-1)


def make_optimizer(model, cfg: OptimConfig, total_steps: int, fused: bool | None = None):
    """AdamW over the trainable parameters (all of them, or a LoRA adapter's) with the
    warm-up-then-cosine schedule. `fused` (None: wherever every parameter is a float tensor on
    the CPU or a GPU) steps all parameters in one kernel: the for-loop AdamW spends ~3x as long
    walking the embedded model's 135M weights, for the same update up to float rounding."""
    params = [p for p in model.parameters() if p.requires_grad]
    if fused is None:
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas),
                            weight_decay=cfg.weight_decay, fused=fused or None)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup_steps, total_steps))


def lr_lambda(warmup: int, total: int):
    """Linear warm-up for `warmup` steps, then cosine decay to 0 at `total` steps."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return f


def _plan(samples: list[Sample], epochs: int, n_mb: int, seed: int) -> list[list[list[int]]]:
    """Sample indices per epoch and minibatch. Each epoch reshuffles (one rng from `seed`, so
    epoch 0 is the single-epoch order), sorts stably by game and deals round-robin, so every
    minibatch sees the games in equal shares (the generalist). Within a minibatch the samples
    are ordered by prompt: its micro-batches then hold samples that share a prompt prefix (a
    seat's rules), which `batch_forward` runs once per micro-batch; the minibatch's gradient is
    their sum whatever the order."""
    rng = random.Random(seed)
    plan = []
    for _ in range(epochs):
        order = list(range(len(samples)))
        rng.shuffle(order)
        order.sort(key=lambda i: samples[i].game)  # stable: still shuffled within a game
        plan.append([sorted(order[i::n_mb], key=lambda i: (samples[i].prompt_ids, i))
                     for i in range(n_mb)])
    return plan


def _per_sample_logps(model, samples, chunks, fwd: Forward) -> dict[int, torch.Tensor]:
    """No-grad log-probs of each sample's completion tokens ([len(completion)] each), computed
    chunk by chunk over `chunks` (lists of sample indices covering every sample once)."""
    out = {}
    with torch.no_grad():
        for chunk in chunks:
            reps, where = rows_of(samples, chunk, fwd.distinct)
            logp, mask = sequence_logprobs(model, [samples[i] for i in reps], fwd)
            for i, row in zip(chunk, where):
                out[i] = logp[row][mask[row].bool()]
    return out


def _right_aligned(rows: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """Stack 1-D tensors right-aligned into `like`'s [B, C] shape (zeros on the left)."""
    out = torch.zeros_like(like)
    for r, v in enumerate(rows):
        if len(v):
            out[r, like.shape[1] - len(v):] = v
    return out


def _minibatch_denominator(samples: list[Sample], mode: str) -> float:
    """`aggregate_denominator` of the whole minibatch, from completion lengths (no forward)."""
    lengths = torch.tensor([len(s.completion_ids) for s in samples])
    mask = torch.arange(int(lengths.max())).unsqueeze(0) < lengths.unsqueeze(1)
    return aggregate_denominator(mask, mode)


# token means (each chunk's mean weighed by its share of the minibatch's tokens, so their sum
# over chunks and ranks is the minibatch's mean)
TOKEN_MEANS = ("clip_frac", "ratio_mean", "approx_kl_old", "behaviour_gap", "behaviour_gap_abs",
               "is_weight_mean", "is_capped_frac")
METRIC_SUMS = ("loss", "pg_loss", "kl", "entropy") + TOKEN_MEANS
METRIC_MAXES = ("ratio_max", "is_weight_max")  # maxima over chunks, ranks and steps


class TorchUpdater:
    """The plain PyTorch step: clip the gradient norm to `grad_clip`, step the optimizer and
    the LR schedule (returns the norm before clipping, the lr); what each pass freed goes back."""

    def __init__(self, model, optimizer, scheduler, grad_clip: float):
        self.model, self.optimizer, self.scheduler, self.grad_clip = model, optimizer, scheduler, grad_clip

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()
        trim_malloc()

    def step(self) -> tuple[float, float]:
        norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip))
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        trim_malloc()
        return norm, lr

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)


def _step(model, updater, ref_logps, old_logps, samples, mb, algo, optim, fwd: Forward,
          rank: int = 0, world: int = 1) -> dict[str, float]:
    """Accumulate this rank's share of the gradient of one minibatch (indices `mb`) over
    micro-batches; returns its metrics (before the optimizer step). Each chunk's terms use the
    whole minibatch's denominator, so the chunks of all ranks add up exactly to the
    one-big-batch loss for every mode. With `world` ranks each loss is multiplied by `world`,
    since the data-parallel backend averages gradients over ranks. The metrics are this
    rank's sums (padding passes add nothing)."""
    mode = algo.loss_aggregation
    mb_samples = [samples[i] for i in mb]
    denom = _minibatch_denominator(mb_samples, mode)
    tokens = sum(len(s.completion_ids) for s in mb_samples)
    metrics = dict.fromkeys(METRIC_SUMS, 0.0) | dict.fromkeys(METRIC_MAXES, 0.0)
    for chunk, weight in rank_chunks(mb, optim.micro_batch_size, rank, world, samples,
                                     fwd.max_tokens, fwd.distinct):
        batch = [samples[i] for i in chunk]
        reps, where = rows_of(samples, chunk, fwd.distinct)
        # entropy is always measured; it carries gradient only when it is a loss term
        logp, mask, ent = sequence_logprobs(model, [samples[i] for i in reps], fwd,
                                            with_entropy=True, entropy_grad=algo.entropy_coef > 0)
        if len(reps) < len(chunk):  # a row per distinct sequence: each sample reads its own
            rows = torch.tensor(where, device=logp.device)
            logp, mask, ent = logp[rows], mask[rows], ent[rows]
        old = (_right_aligned([old_logps[i] for i in chunk], logp) if old_logps is not None
               else logp.detach())
        ref = _right_aligned([ref_logps[i] for i in chunk], logp) if ref_logps is not None else None
        behaviour, known = _behaviour(batch, logp)
        w = importance_weights(old, behaviour, known, algo.is_cap)
        adv = torch.tensor([s.advantage for s in batch], dtype=logp.dtype, device=logp.device)
        loss, m = ppo_objective(logp, old, ref, adv, mask, clip_eps=algo.clip_eps,
                                dual_clip=algo.dual_clip, kl_coef=algo.kl_coef, entropy=ent,
                                entropy_coef=algo.entropy_coef, aggregation=mode,
                                denominator=denom, clip_eps_high=algo.clip_eps_high, weights=w,
                                # mirror rows carry target probabilities, fitted by likelihood
                                surrogate="likelihood" if algo.train_actions == "mirror"
                                else "clipped")
        scale = weight * world
        updater.backward(loss if scale == 1.0 else loss * scale)
        if weight == 0.0:
            continue
        m |= behaviour_metrics(old, behaviour, known * mask, w, mask, algo.is_cap)
        m["loss"] = float(loss.detach())
        share = float(mask.sum()) / tokens if tokens else 0.0  # token means: weigh by tokens
        for k, v in m.items():
            if k in METRIC_MAXES:
                metrics[k] = max(metrics[k], v)
            else:
                metrics[k] = metrics.get(k, 0.0) + (v * share if k in TOKEN_MEANS else v)
    return metrics


def _behaviour(batch: list[Sample], like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A chunk's behaviour log-probs right-aligned like `like` [B, C], and the mask of the
    tokens whose behaviour is known (rows with a log-prob per completion token)."""
    known = [len(s.behaviour) == len(s.completion_ids) > 0 for s in batch]
    rows = [torch.tensor(s.behaviour if k else (), dtype=like.dtype) for s, k in zip(batch, known)]
    ones = [torch.ones(len(s.completion_ids) if k else 0) for s, k in zip(batch, known)]
    return _right_aligned(rows, like), _right_aligned(ones, like)


def _gather_logps(local: dict[int, torch.Tensor], world: int) -> dict[int, torch.Tensor]:
    """Every rank's share of per-sample log-probs, merged (all_gather_object, CPU tensors)."""
    if world == 1:
        return local
    parts: list = [None] * world
    torch.distributed.all_gather_object(parts, {i: v.cpu() for i, v in local.items()})
    return {i: v for part in parts for i, v in part.items()}


def _sum_over_ranks(metrics: dict[str, float], world: int) -> dict[str, float]:
    """The `METRIC_SUMS` (sums over micro-batches; every rank has them, padding-only ranks
    as zeros) summed over ranks too, and the `METRIC_MAXES` maximised, with one all_reduce
    each; any other key stays this rank's."""
    if world == 1:
        return metrics
    t = torch.tensor([metrics[k] for k in METRIC_SUMS], dtype=torch.float64)
    torch.distributed.all_reduce(t)
    top = torch.tensor([metrics[k] for k in METRIC_MAXES], dtype=torch.float64)
    torch.distributed.all_reduce(top, op=torch.distributed.ReduceOp.MAX)
    return {**metrics, **dict(zip(METRIC_SUMS, t.tolist())), **dict(zip(METRIC_MAXES, top.tolist()))}


def _logps_share(model, samples, chunks, fwd: Forward, rank, world):
    """No-grad log-probs of this rank's share of `chunks` (dealt round-robin; short ranks
    repeat a one-sample chunk so all run the same number of forwards, which ZeRO-3's
    parameter gathering needs), gathered so every rank has all of them."""
    mine = chunks[rank::world]
    mine = mine + [[chunks[0][0]]] * (-(-len(chunks) // world) - len(mine))
    return _gather_logps(_per_sample_logps(model, samples, mine, fwd), world)


def ppo_update(model, ref_model, updater, samples: list[Sample], algo: AlgorithmConfig,
               optim: OptimConfig, *, pad_id: int, seed: int, bf16: bool = False,
               share_prefix: bool = True, progress: bool = True, rank: int = 0,
               world: int = 1, on_step=None, distinct: bool = True) -> dict[str, float]:
    """`algo.ppo_epochs` passes over the samples, each `optim.minibatches` optimizer steps
    (reshuffled per epoch, games in equal shares per minibatch), each accumulated over
    micro-batches (at most `optim.micro_batch_size` distinct sequences and
    `optim.micro_batch_tokens` padded positions each; samples with the same sequence share a
    row unless `distinct` is False: `mars_core.training.chunks`) so that the update equals one
    big batch's for every loss aggregation mode. `updater` does backward / step / zero_grad
    (`TorchUpdater`, or the DeepSpeed engine's `DeepSpeedUpdater`).

    Data parallel (`world` > 1, this process is `rank`): every rank runs the same plan; each
    minibatch's samples are dealt to the ranks (`mars_core.training.chunks.rank_chunks`), old
    and reference log-probs are computed in shares (each distinct sequence once) and
    all-gathered, and the summed metrics are all-reduced.
    `world == 1` never touches torch.distributed.

    Old log-probs (the proximal policy of the trust region: the weights at the start of the
    update) are computed once, before the first step, whenever more than one optimizer step
    happens (otherwise the current ones, detached, are exact). Each token's loss is weighted
    by min(pi_old / pi_behaviour, algo.is_cap), pi_behaviour the log-prob the engine recorded
    when it sampled (decoupled PPO: a stale bank turn, or an engine whose kernels or
    truncation differ from the trainer's, is corrected). Reference log-probs are computed once
    per sample and only when kl_coef > 0 (`ref_model` may be None when kl_coef == 0); token
    entropy is always measured, and trained only when entropy_coef > 0.
    `on_step(j, metrics)` gets optimizer step j's metrics. Returns each metric's mean over
    the steps (`METRIC_SUMS`, grad_norm, lr), the `METRIC_MAXES`' maxima, optimizer_steps
    and samples."""
    if algo.kl_coef > 0 and ref_model is None:
        raise ValueError("ppo_update: kl_coef > 0 needs a reference model (ref_model is None)")
    if not 0 <= rank < world:
        raise ValueError(f"ppo_update: rank {rank} is not in [0, world={world})")
    n_mb = min(optim.minibatches, len(samples))
    plan = _plan(samples, algo.ppo_epochs, n_mb, seed)
    n_steps = algo.ppo_epochs * n_mb
    fwd = Forward(pad_id, bf16, share_prefix, distinct, optim.micro_batch_tokens)
    # the no-grad passes: every distinct sequence once, in prompt order (shared prefixes)
    by_prompt = sorted(range(len(samples)), key=lambda i: (samples[i].prompt_ids, i))
    first_chunks = ([c for mb in ([by_prompt] if distinct else plan[0]) for c in
                     distinct_chunks(samples, mb, optim.micro_batch_size, fwd.max_tokens, distinct)])
    args = (samples, first_chunks, fwd, rank, world)
    old_logps = _logps_share(model, *args) if n_steps > 1 else None
    ref_logps = _logps_share(ref_model, *args) if algo.kl_coef > 0 else None
    model.train()
    micro = [len(rank_chunks(mb, optim.micro_batch_size, rank, world, samples, fwd.max_tokens,
                             fwd.distinct))
             for ep in plan for mb in ep]
    bar = tqdm(total=sum(micro), desc="train", unit="micro", disable=not progress or rank != 0,
               leave=False)
    steps: list[dict[str, float]] = []
    for j, (mb, n_micro) in enumerate(zip((mb for epoch in plan for mb in epoch), micro)):
        updater.zero_grad()
        m = _step(model, updater, ref_logps, old_logps, samples, mb, algo, optim, fwd, rank,
                  world)
        m = _sum_over_ranks(m, world)
        if algo.max_kl is not None and j > 0 and m["approx_kl_old"] > algo.max_kl:
            # the trust region: the weights already moved past the bound (measured on this
            # minibatch before its step, the same on every rank); no further step, and the
            # gradient this minibatch accumulated is dropped
            updater.zero_grad()
            break
        bar.update(n_micro)
        m["grad_norm"], m["lr"] = updater.step()
        if on_step is not None:
            on_step(j, dict(m))
        steps.append(m)
    bar.close()
    model.eval()
    totals: dict[str, float] = {}
    for m in steps:
        for k, v in m.items():
            totals[k] = (max(totals.get(k, v), v) if k in METRIC_MAXES
                         else totals.get(k, 0.0) + v / len(steps))
    totals["optimizer_steps"] = float(len(steps))
    totals["trust_region_stops"] = float(len(steps) < n_steps)
    totals["samples"] = float(len(samples))
    return totals
