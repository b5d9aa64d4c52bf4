"""Shared prompt prefixes: one forward pass through a prefix that many rows of a batch share.

Every prompt of a game starts with the same chat-template header and rules text (a seat's
rules: ~190 of ~300 tokens in Tic-Tac-Toe), so a batch of turns repeats the same tokens
again and again. `batch_forward` finds the shared prefixes of a batch (`plan_prefixes`), runs
each distinct prefix once, gives every row the keys and values of its prefix (a gather: the
backward pass adds the rows' gradients into the one prefix computation) and runs only the
rest of each row on top. The sampler (`engines.hf`) and the trainer (`trainer`) both call
it, so sampling and the update see the same numbers up to float summation order.

Layout of row i after the call (P = the longest prefix, W = the longest rest):

    [ pad ... prefix_i | pad ... rest_i ]      attention mask 0 on the pads
      positions 0 .. len(prefix_i) - 1, then len(prefix_i) .. len(prefix_i) + len(rest_i) - 1

Keys carry their rotary positions, so padding in the middle changes nothing. A batch where
no prefix pays for itself runs as one left-padded forward, as before.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

MIN_SHARED = 32  # tokens a group must share before a separate prefix pass is worth it
OVERHEAD = 16  # the cost, in tokens, charged for each extra prefix row


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def plan_prefixes(seqs: Sequence[Sequence[int]], own: Sequence[int] | None = None,
                  min_shared: int = MIN_SHARED) -> list[int]:
    """How many leading tokens of each row come from a shared prefix (0 for every row when
    sharing does not pay). Row i keeps its last `own[i]` tokens (default 1) out of its prefix:
    those are the positions whose logits its caller reads.

    Rows are sorted (lexicographically, so rows with a common prefix are neighbours); a run of
    neighbours shares the smallest common prefix of its pairs, capped by what its rows must
    keep. A run is kept whole when that costs fewer token positions (its prefix once, plus
    each row's rest, plus `OVERHEAD`) than splitting it at its weakest link, recursively. When
    any group shares `min_shared` tokens or more, every other row gets a one-token prefix (its
    first token), so the layout is the same for all rows."""
    n = len(seqs)
    own = list(own) if own is not None else [1] * n
    cap = [len(s) - max(1, k) for s, k in zip(seqs, own)]  # the longest prefix each row allows
    if n < 2 or min(cap) < 1:
        return [0] * n
    order = sorted(range(n), key=lambda i: tuple(seqs[i]))
    links = [_lcp(seqs[a], seqs[b]) for a, b in zip(order, order[1:])]
    lengths = [0] * n

    def best(lo: int, hi: int) -> tuple[int, list[tuple[int, int, int]]]:
        """Cost and (lo, hi, prefix) groups for sorted rows lo..hi (inclusive)."""
        rows = order[lo:hi + 1]
        plain = sum(len(seqs[i]) for i in rows)
        if lo == hi:
            return plain, []
        weakest = min(links[lo:hi])
        p = min(weakest, min(cap[i] for i in rows))
        whole = p + plain - p * len(rows) + OVERHEAD if p >= min_shared else plain
        cost, groups = 0, []
        start = lo
        for j in range(lo, hi + 1):  # split at every weakest link
            if j == hi or links[j] == weakest:
                c, g = best(start, j)
                cost, groups = cost + c, groups + g
                start = j + 1
        if p >= min_shared and whole <= cost:
            return whole, [(lo, hi, p)]
        return cost, groups

    _, groups = best(0, n - 1)
    if not groups:
        return lengths
    lengths = [1] * n
    for lo, hi, p in groups:
        for i in order[lo:hi + 1]:
            lengths[i] = p
    return lengths


@dataclass
class BatchOutput:
    """`logits` [B, keep, V] of the last `keep` positions; `cache` of every position (None
    unless asked for); `mask` and `positions` [B, L] of the whole layout (for decoding on)."""

    logits: torch.Tensor
    cache: object
    mask: torch.Tensor
    positions: torch.Tensor


def _hf_config(model):
    """The transformers config under wrappers (a DeepSpeed engine's own `config` is a dict)."""
    from transformers import PretrainedConfig

    for m in (model, getattr(model, "module", None)):
        cfg = getattr(m, "config", None)
        if isinstance(cfg, PretrainedConfig):
            return cfg
    return None


def _checkpointing(model) -> bool:
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def _left_padded(rows: Sequence[Sequence[int]], pad_id: int, device):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            ids[i, width - len(r):] = torch.tensor(list(r), dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids.to(device), mask.to(device)


class PrefixCache:
    """The keys and values of prompt prefixes, kept from one call to the next (the sampler's:
    a seat's rules come back in every call of a rollout). Each prefix is computed alone, so
    its keys and values never depend on which prompts share its call, its batch or its shard.
    An entry is used only while the model's weights are the ones it was computed with (the
    parameters' in-place version counters: an optimizer step, a warm-up in place, a weight
    reload all move them). The least recently used entries go while the entries hold more than
    `max_tokens` tokens (the newest always stays): the embedded model's keys and values take
    about 46 kB a token in fp32, so 4,096 tokens about 190 MB."""

    def __init__(self, max_tokens: int = 4096):
        from collections import OrderedDict

        self.max_tokens = max_tokens
        self.entries: OrderedDict[tuple[int, ...], list] = OrderedDict()
        self.weights: tuple | None = None
        self.reused = self.computed = 0  # prefix tokens taken from the cache / run

    def layers(self, model, prefix: tuple[int, ...], device) -> list:
        """[(keys, values)] per layer of `prefix` ([1, heads, len, head_dim] each)."""
        params = list(model.parameters())
        weights = (id(model), len(params), sum(p._version for p in params))
        if weights != self.weights:
            self.entries.clear()
            self.weights = weights
        hit = self.entries.get(prefix)
        if hit is not None:
            self.entries.move_to_end(prefix)
            self.reused += len(prefix)
            return hit
        ids = torch.tensor([prefix], dtype=torch.long, device=device)
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                    position_ids=torch.arange(len(prefix), device=device).unsqueeze(0),
                    use_cache=True, logits_to_keep=1).past_key_values
        hit = [(layer.keys, layer.values) for layer in out.layers]
        self.entries[prefix] = hit
        self.computed += len(prefix)
        while len(self.entries) > 1 and sum(map(len, self.entries)) > self.max_tokens:
            self.entries.popitem(last=False)
        return hit


def _cached_head(model, prefixes: list[tuple[int, ...]], cache: PrefixCache, device):
    """The prefixes' keys and values from `cache`, left-padded to the longest (zeros under a
    zero mask: they get no attention), as the batched prefix pass lays them out."""
    width = max(len(q) for q in prefixes)
    per = [cache.layers(model, q, device) for q in prefixes]
    kv = []
    for j in range(len(per[0])):
        keys, values = [], []
        for q, layers in zip(prefixes, per):
            k, v = layers[j]
            pad = width - len(q)
            keys.append(torch.nn.functional.pad(k, (0, 0, pad, 0)))
            values.append(torch.nn.functional.pad(v, (0, 0, pad, 0)))
        kv.append((torch.cat(keys), torch.cat(values)))
    mask = torch.zeros((len(prefixes), width), dtype=torch.long, device=device)
    for i, q in enumerate(prefixes):
        mask[i, width - len(q):] = 1
    return kv, mask


def batch_forward(model, seqs: Sequence[Sequence[int]], pad_id: int, *, logits_to_keep: int,
                  own: Sequence[int] | None = None, use_cache: bool = False,
                  share_prefix: bool = True, min_shared: int = MIN_SHARED,
                  prefix_cache: PrefixCache | None = None,
                  prefix_lengths: Sequence[int] | None = None) -> BatchOutput:
    """One forward pass over `seqs` (left-padded: every row ends at the last position), through
    each shared prefix once when `share_prefix` and `plan_prefixes` finds one worth it.
    Of the last `logits_to_keep` positions, row i's last `own[i]` (default: all of them) are
    exact; earlier ones may lie inside its prefix and hold padding (the trainer reads a
    completion plus one position per row, the sampler one).
    Gradients flow as in the plain pass (through the gathered prefix keys and values). A model
    training with gradient checkpointing runs the plain pass: its checkpointed layers drop
    `past_key_values`, which would silently cut the rows off their prefix.
    `prefix_cache` (the sampler's, without gradients): each shared prefix comes from it, computed
    alone the first time it is seen. `prefix_lengths`: each row's prefix, chosen by the caller
    (rows that share a prompt's head but differ after it: the exploitability reader's states)
    instead of `plan_prefixes`' choice."""
    device = next(model.parameters()).device
    share_prefix = share_prefix and not (model.training and _checkpointing(model))
    own = list(own) if own is not None else [min(logits_to_keep, len(s)) for s in seqs]
    if prefix_lengths is not None and share_prefix:
        lengths = list(prefix_lengths)
    else:
        lengths = plan_prefixes(seqs, own, min_shared) if share_prefix else [0] * len(seqs)
    if not any(lengths):
        ids, mask = _left_padded(seqs, pad_id, device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                    use_cache=use_cache, logits_to_keep=logits_to_keep)
        return BatchOutput(out.logits, out.past_key_values if use_cache else None, mask,
                           positions)
    from transformers import DynamicCache

    prefixes: dict[tuple[int, ...], int] = {}
    group = [prefixes.setdefault(tuple(s[:n]), len(prefixes)) for s, n in zip(seqs, lengths)]
    rows = torch.tensor(group, dtype=torch.long, device=device)
    if prefix_cache is not None and not torch.is_grad_enabled():
        head, p_mask = _cached_head(model, list(prefixes), prefix_cache, device)
    else:
        p_ids, p_mask = _left_padded(list(prefixes), pad_id, device)
        p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True,
                    logits_to_keep=1).past_key_values
        head = [(layer.keys, layer.values) for layer in out.layers]
    p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)
    kv = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in head]
    cache = DynamicCache(ddp_cache_data=kv, config=_hf_config(model))
    s_ids, s_mask = _left_padded([s[n:] for s, n in zip(seqs, lengths)], pad_id, device)
    offset = torch.tensor(lengths, dtype=torch.long, device=device).unsqueeze(1)
    s_pos = offset + (s_mask.cumsum(-1) - 1).clamp(min=0)
    mask = torch.cat([p_mask.index_select(0, rows), s_mask], dim=1)
    out = model(input_ids=s_ids, attention_mask=mask, position_ids=s_pos, past_key_values=cache,
                use_cache=use_cache, logits_to_keep=logits_to_keep)
    positions = torch.cat([p_pos.index_select(0, rows), s_pos], dim=1)
    return BatchOutput(out.logits, out.past_key_values if use_cache else None, mask, positions)


@contextlib.contextmanager
def gradient_checkpointing(model, enabled: bool):
    """Gradient checkpointing on `model` for the block's training only (the model plays again
    after it, with its KV cache)."""
    enable_gradient_checkpointing(model, enabled)
    try:
        yield model
    finally:
        if enabled:
            if hasattr(model, "activation_checkpointing_disable"):
                model.activation_checkpointing_disable()
            else:
                model.gradient_checkpointing_disable()


def enable_gradient_checkpointing(model, enabled: bool) -> None:
    """`trainer.gradient_checkpointing`: recompute activations in backward (less memory, one
    more forward per micro-batch). Non-reentrant, so it works with frozen inputs and ZeRO.
    transformers >= 5.2x names it `activation_checkpointing_enable` (the old name warns)."""
    if not enabled:
        return
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
