"""An in-process transformers engine: batched sampling with a hand-written KV-cache loop.

Written by hand rather than with `model.generate` because the trainer needs, for every sampled
token, the log-prob under exactly the distribution it recomputes, and because the rollout loop
needs per-sequence stop strings, context-overflow handling and reproducible seeds.

Log-probs: `logprobs[i]` is the log-prob of token_i under the distribution it was drawn from:
softmax(logits / temperature) truncated by top-k, top-p and min-p and renormalised (temperature
0: the untempered softmax), as vLLM's `processed_logprobs`. This is the behaviour policy of
decoupled PPO: the trainer recomputes the untruncated softmax at the start of the update (the
proximal policy) and weighs each token by their ratio (`mars_core.training.losses.importance_weights`).
Untruncated (top_k 0, top_p 1, min_p 0), the two agree to float precision.

Randomness: each prompt gets its own `torch.Generator`, seeded from (params.seed, its index in
the call), and draws one uniform per token (on the CPU; on a GPU the rows of a step are then
filtered and sampled together on the device, `sample_rows`, to the same tokens). So a
completion depends on its prompt, the seed and its index only, not on batch size or the other
prompts; identical prompts at different indices (a GRPO group) get different samples.

Shared prefixes: prompts are batched in sorted order, so prompts that start alike (a game's
rules text) land in one batch, and the prefill runs each shared prefix once
(`mars_core.models.prefix.batch_forward`, `share_prefix`); the decode loop then continues on the
gathered cache as on any other. The prefixes' keys and values are kept from call to call
(`PrefixCache`, while the weights stay the same): a seat's rules are computed once per engine,
not once per call, each alone, so they never depend on the prompts around them.
"""
from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from mars_core.engines.base import prompt_seed
from mars_core.models.prefix import PrefixCache, batch_forward
from mars_core.types import Completion, SamplingParams
from mars_core.vocab import FinishReason


def quantize_int8(model):
    """`model` with each `torch.nn.Linear` replaced by torch's dynamic int8 linear layer."""
    import warnings

    with warnings.catch_warnings():  # torch 2.13 announces its removal (torchao's successor)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantiz.* are deprecated")
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear},
                                                      dtype=torch.qint8)


class HFEngine:
    """Batched sampler over a Hugging Face causal LM (see the module docstring)."""

    def __init__(self, model, tokenizer, batch_size: int = 32, autocast_bf16: bool = False,
                 share_prefix: bool = True, batch_invariant: bool = False):
        self.model = model.eval()
        self.batch_invariant = batch_invariant  # mars_core.models.invariant
        if batch_invariant:
            from mars_core.models.invariant import make_batch_invariant

            make_batch_invariant(self.model, switch=False)  # its attention: in `generate`
        self.tokenizer = tokenizer
        self.batch_size = max(1, int(batch_size))
        self.autocast_bf16 = autocast_bf16
        self.share_prefix = share_prefix
        self.prefix_cache = PrefixCache()  # a seat's rules, computed once for every call
        self.eos_ids = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids, default=0)
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 1 << 30))
        self.device = next(model.parameters()).device  # inputs go there
        # where the rows are sampled: on the CPU one row at a time (`sample_token`); on a GPU
        # all rows of a step at once on the device (`sample_rows`: the same draws and filters,
        # no full-vocabulary copy to the host, a handful of launches instead of a few per row)
        self.sample_on_device = self.device.type != "cpu"
        self.stats = {"calls": 0, "prompts": 0, "prompt_tokens": 0, "generated_tokens": 0,
                      "seconds": 0.0}

    @classmethod
    def from_path(cls, path, dtype=torch.float32, batch_size: int = 32,
                  autocast_bf16: bool = False, device: str | None = None,
                  share_prefix: bool = True, int8: bool = False,
                  batch_invariant: bool = False, fp32_weights: bool = False) -> "HFEngine":
        """Load model and tokenizer from a folder or hub id (see `mars_core.models.weights`), onto
        `device` (default: the GPU where there is one). `int8`: every linear layer as torch's
        dynamic int8 one (weights int8, activations quantized per call: AVX512-VNNI dot
        products where the CPU has them), a CPU-only sampler whose log-probs differ from the
        exact policy's (`rollout.int8`: the update's importance weight corrects that).
        `batch_invariant`: every row's turn the same whatever else shares its batch
        (`mars_core.models.invariant`). Under bf16 autocast the linear layers' weights are held
        in bf16 (`hold_linears_in_bf16`: the same replies to the bit, 0.2 GB less for the
        embedded model) unless `fp32_weights`: the caller trains the engine's model in place or
        runs it outside autocast (the format warm-up)."""
        from mars_core.models.weights import load_model, load_tokenizer

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model = load_model(path, dtype=dtype).to(device)
        if int8:
            if device != "cpu":
                raise ValueError(f"int8 sampling (rollout.int8) runs on the CPU, not {device}")
            model = quantize_int8(model)
            autocast_bf16 = False  # the int8 layers compute in their own precision
        elif autocast_bf16 and not fp32_weights:
            from mars_core.models.precision import hold_linears_in_bf16

            hold_linears_in_bf16(model)
        return cls(model, load_tokenizer(path), batch_size, autocast_bf16, share_prefix,
                   batch_invariant)

    def tokens_per_second(self) -> float:
        """Generated tokens per wall-clock second over all calls so far."""
        return self.stats["generated_tokens"] / max(self.stats["seconds"], 1e-9)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt, in input order. Prompts that leave no room for a single
        new token get an empty completion with finish_reason "context_overflow"."""
        if not self.batch_invariant:
            return self._generate(prompts, params)
        from mars_core.models.invariant import invariant_attention

        with invariant_attention(self.model):
            return self._generate(prompts, params)

    def _generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        started = time.perf_counter()
        out: list[Completion | None] = [None] * len(prompts)
        runnable = []
        for i, prompt in enumerate(prompts):
            if len(prompt) == 0:
                raise ValueError(f"prompt {i} is empty")
            if len(prompt) >= self.max_positions:
                out[i] = Completion((), (), "", FinishReason.CONTEXT_OVERFLOW)
            else:
                runnable.append(i)
        # prompts that start alike share a batch (and its prefix pass); else similar lengths
        runnable.sort(key=(lambda i: tuple(prompts[i])) if self.share_prefix
                      else (lambda i: len(prompts[i])))
        groups, prefixes = [runnable], None
        if self.batch_invariant and self.share_prefix:  # each row's prefix from the row alone
            from mars_core.models.invariant import first_turn

            prefixes = {i: first_turn(prompts[i], self.eos_ids) for i in runnable}
            # a batch's rows of one length share their attention calls (the order of rows
            # changes no reply here: the prefixes come from each row and from the cache)
            runnable.sort(key=lambda i: (len(prompts[i]) - prefixes[i], len(prompts[i])))
            # rows with a prefix and rows without are never batched together
            groups = [[i for i in runnable if prefixes[i]],
                      [i for i in runnable if not prefixes[i]]]
        for group in groups:
            for start in range(0, len(group), self.batch_size):
                idx = group[start:start + self.batch_size]
                lengths = [prefixes[i] for i in idx] if prefixes else None
                done = self._generate_batch([list(prompts[i]) for i in idx], idx, params, lengths)
                for i, completion in zip(idx, done):
                    out[i] = completion
        self.stats["calls"] += 1
        self.stats["prompts"] += len(prompts)
        self.stats["prompt_tokens"] += sum(len(prompts[i]) for i in runnable)
        self.stats["seconds"] += time.perf_counter() - started
        return out  # type: ignore[return-value]

    def _generate_batch(self, prompts, indices, params, prefix_lengths=None) -> list[Completion]:
        """Prefill the batch (left-padded, each shared prefix once: `prefix_lengths`, or as
        `batch_forward` plans them), then decode one token at a time with the KV cache. Finished
        rows are dropped from the batch (and cache) so they cost no more compute."""
        seqs = [_Sequence(self, p, params, _generator(params, i))
                for p, i in zip(prompts, indices)]
        if params.max_new_tokens <= 0:
            return [s.result() for s in seqs]
        active = list(range(len(prompts)))  # rows of `seqs` still in the batch, in cache order
        with torch.inference_mode(), self._autocast():
            first = batch_forward(self.model, prompts, self.pad_id, logits_to_keep=1,
                                  use_cache=True, share_prefix=self.share_prefix,
                                  prefix_cache=self.prefix_cache,
                                  prefix_lengths=prefix_lengths)
            logits, cache = self._last_logits(first.logits), first.cache
            mask, positions = first.mask, first.positions[:, -1:]
            while True:
                tokens = self._sample(logits, [seqs[r] for r in active])
                keep = [k for k, r in enumerate(active) if not seqs[r].finished]
                if not keep:
                    break
                if len(keep) < len(active):
                    sel = torch.tensor(keep, dtype=torch.long, device=self.device)
                    cache.batch_select_indices(sel)
                    mask, positions = mask[sel], positions[sel]
                    tokens = [tokens[k] for k in keep]
                    active = [active[k] for k in keep]
                ids = torch.tensor(tokens, dtype=torch.long, device=self.device).unsqueeze(1)
                mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
                positions = positions + 1
                logits, cache = self._forward(ids, mask, positions, cache)
        self.stats["generated_tokens"] += sum(len(s.tokens) for s in seqs)
        return [s.result() for s in seqs]

    def _forward(self, ids, mask, positions, cache):
        """Logits of the last position only (`logits_to_keep=1`: no full-vocab prompt logits)."""
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=1)
        return self._last_logits(out.logits), out.past_key_values

    def _last_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The last position's logits as float32: on the CPU, where each row's generator
        samples, or left on the device when the rows are sampled there."""
        last = logits[:, -1, :].float()
        return last if self.sample_on_device else last.cpu()

    def _sample(self, logits: torch.Tensor, seqs: list["_Sequence"]) -> list[int]:
        """One token for each row of `logits` (row k is `seqs[k]`'s), each sequence's stop
        state updated."""
        if not self.sample_on_device:
            return [seq.step(logits[k]) for k, seq in enumerate(seqs)]
        tokens, logprobs = sample_rows(logits, seqs[0].params, [seq.gen for seq in seqs])
        return [seq.take(t, lp) for seq, t, lp in zip(seqs, tokens, logprobs)]

    def _autocast(self):
        if not self.autocast_bf16:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)


class _Sequence:
    """One row's sampling state: its generator, sampled tokens, log-probs and stop logic."""

    def __init__(self, engine: HFEngine, prompt, params: SamplingParams, gen: torch.Generator):
        self.engine, self.params, self.gen = engine, params, gen
        self.budget = min(params.max_new_tokens, engine.max_positions - len(prompt))
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.text: str | None = None
        self.reason = ""

    @property
    def finished(self) -> bool:
        return bool(self.reason)

    def step(self, logits: torch.Tensor) -> int:
        """Sample one token from this row's logits and update the stop state."""
        return self.take(*sample_token(logits, self.params, self.gen))

    def take(self, token: int, logprob: float) -> int:
        """Append a sampled token (and its log-prob) and update the stop state."""
        self.tokens.append(token)
        self.logprobs.append(logprob)
        if token in self.engine.eos_ids:
            self.reason = FinishReason.STOP
        elif self.params.stop and self._hit_stop_string():
            self.reason = FinishReason.STOP
        elif len(self.tokens) >= self.budget:
            self.reason = FinishReason.LENGTH
        return token

    def _hit_stop_string(self) -> bool:
        """Cut the text right after the earliest-ending stop string, if one appeared."""
        text = self.engine.tokenizer.decode(self.tokens, skip_special_tokens=False)
        ends = [text.find(s) + len(s) for s in self.params.stop if s and s in text]
        if not ends:
            return False
        self.text = text[:min(ends)]
        return True

    def result(self) -> Completion:
        if self.text is None:
            body = self.tokens[:-1] if self.tokens and self.tokens[-1] in self.engine.eos_ids \
                else self.tokens
            self.text = self.engine.tokenizer.decode(body, skip_special_tokens=False)
        return Completion(tuple(self.tokens), tuple(self.logprobs), self.text,
                          self.reason or FinishReason.LENGTH)


def sample_token(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator):
    """Sample from one row of logits: temperature, then top-k, then top-p (nucleus), then
    min-p (drop tokens less likely than min_p x the most likely one).

    Returns (token, its log-prob under the truncated, renormalised distribution it was drawn
    from). One uniform draw per token (inverse CDF), so the generator advances identically
    whatever the filters keep."""
    if params.temperature <= 0:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, -1)[token])
    scaled = logits / params.temperature
    k = params.top_k if 0 < params.top_k < scaled.numel() else scaled.numel()
    values, order = torch.topk(scaled, k)  # sorted, descending
    probs = torch.softmax(values, -1)
    if params.top_p < 1.0:
        keep = probs.cumsum(-1) - probs < params.top_p  # mass of more likely tokens < top_p
        keep[0] = True  # the most likely token always survives, even for top_p <= 0
        probs = torch.where(keep, probs, torch.zeros_like(probs))
    if params.min_p > 0:
        probs = torch.where(probs >= params.min_p * probs[0], probs, torch.zeros_like(probs))
    cdf = probs.cumsum(-1)
    u = torch.rand((1,), generator=gen, dtype=cdf.dtype) * cdf[-1]
    pick = min(int(torch.searchsorted(cdf, u, right=True)), k - 1)
    while probs[pick] <= 0:  # u on a flat stretch of the cdf: the next kept token below
        pick -= 1
    token = int(order[pick])
    return token, float(values[pick] - torch.logsumexp(values[probs > 0], -1))


def sample_rows(logits: torch.Tensor, params: SamplingParams, gens: list[torch.Generator]
                ) -> tuple[list[int], list[float]]:
    """`sample_token` for every row of `logits` ([rows, vocab], on any device) at once: the
    same filters, and each row's one uniform drawn from its own (CPU) generator in the same
    order, so a row's token is the one `sample_token` draws (up to the device's rounding at a
    cdf boundary). Two small copies to the host a step (the tokens and their log-probs), not
    the logits."""
    if params.temperature <= 0:
        tokens = torch.argmax(logits, -1)
        logprobs = torch.log_softmax(logits, -1).gather(-1, tokens[:, None])[:, 0]
        return tokens.tolist(), logprobs.tolist()
    scaled = logits / params.temperature
    vocab = scaled.shape[-1]
    k = params.top_k if 0 < params.top_k < vocab else vocab
    values, order = torch.topk(scaled, k, dim=-1)  # sorted, descending
    probs = torch.softmax(values, -1)
    if params.top_p < 1.0:
        keep = probs.cumsum(-1) - probs < params.top_p
        keep[:, 0] = True
        probs = torch.where(keep, probs, torch.zeros_like(probs))
    if params.min_p > 0:
        probs = torch.where(probs >= params.min_p * probs[:, :1], probs, torch.zeros_like(probs))
    cdf = probs.cumsum(-1)
    u = torch.cat([torch.rand((1,), generator=g, dtype=cdf.dtype) for g in gens])
    u = u.to(cdf.device)[:, None] * cdf[:, -1:]
    pick = torch.searchsorted(cdf, u, right=True).clamp_(max=k - 1)
    # u on a flat stretch of the cdf: the next kept token below (sample_token's while loop)
    index = torch.arange(k, device=probs.device).expand_as(probs)
    last_kept = torch.where(probs > 0, index, torch.zeros_like(index)).cummax(-1).values
    pick = last_kept.gather(-1, pick)
    tokens = order.gather(-1, pick)[:, 0]
    kept = torch.where(probs > 0, values, torch.full_like(values, float("-inf")))
    logprobs = values.gather(-1, pick)[:, 0] - torch.logsumexp(kept, -1)
    return tokens.tolist(), logprobs.tolist()


def _generator(params: SamplingParams, index: int) -> torch.Generator:
    """A generator for prompt `index` of a call (independent of batching)."""
    return torch.Generator().manual_seed(prompt_seed(params, index))


def _eos_ids(model, tokenizer) -> frozenset[int]:
    """End-of-sequence ids: the tokenizer's plus those of the model's generation config."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    cfg = getattr(model, "generation_config", None)
    extra = getattr(cfg, "eos_token_id", None) if cfg is not None else None
    if extra is not None:
        ids.update(int(e) for e in (extra if isinstance(extra, (list, tuple)) else [extra]))
    return frozenset(ids)
