"""Batch-invariant forward passes: a row's logits the same bits whatever else shares its batch.

In bf16 the in-process engine's turns depended on their batch (issue 64: one process and three
shards sampled different replies in 6 of 6 turns). Measured on an AMD EPYC with AVX512-BF16
(`bench/invariance_bench.py` has the checks), three things made a row depend on the others, and
an Intel Xeon with AMX showed a fourth:

1. **Attention over padding.** Rows of a batch are left-padded to the longest; the padded keys
   get no weight, but the attention kernel's reductions run over a longer, shifted key axis, so
   a row's sums are taken in another order (logits apart by up to 0.4 in bf16, 3e-5 in fp32).
2. **Which prefix a row shares.** The engine runs a shared prefix (a seat's rules) once and the
   rest of each row on top; how long that prefix is was chosen from the batch (the rows' longest
   common prefix), and a prompt computed in two pieces differs from one computed whole.
3. **A one-row matrix product.** A linear layer's bf16 product on a single row (M = 1: the last
   row of a batch still decoding, a row alone) takes another kernel than on two or more rows,
   whose sums differ in the last bit (seen at K = 1,536, the MLP's down projection); from two
   rows up every M gave the same bits there (M = 2 ... 512, every layer's shape).
4. **A product on more than 32 rows**, on an Intel Xeon with AMX: there every M from 1 to 32
   gave each row the same bits, and from 33 rows up the bf16 kernel changes (1 to 60 of the
   rows off in the last bits, every layer shape of the embedded model; the prefill of a batch
   runs thousands of rows).

So batch-invariant mode:
1. computes each row's attention on that row's own keys (padding removed), with the causal
   pattern among them (`row_attention`: the transformers attention interface), rows with as
   many keys and queries of their own in one call;
2. takes each row's shared prefix from the row alone: its first turn, through the first
   end-of-turn token (a chat prompt's system message: the game's rules; `first_turn`), computed
   alone and cached as before, so rows with the same rules still share it;
3. runs a linear layer's one-row product on two rows (the row twice) and keeps the first;
4. inside the engine's calls, where this machine's products depend on their row count in the
   engine's precision (`_rows_vary`, measured once), runs a product on more than `ROWS` (32)
   rows in pieces of 2 to 32 rows, which both CPUs compute alike whatever their neighbours.

Norms, rotary embeddings and the sampling (each row's own generator) were already independent
of the batch. The engine (`HFEngine(batch_invariant=True)`)
switches its model's attention only for its own calls (`invariant_attention`): the format
warm-up trains the engine's model in place with the plain attention. A model with
sliding-window attention is refused (the causal pattern above is the full one). What it costs
is measured, not assumed (`bench/invariance_bench.py`, docs/reliability.md).
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import contextmanager
from functools import partial

import torch

NAME = "mars_batch_invariant"  # the attention implementation's registered name
_registered = False


_plan: tuple = (None, None)  # (the mask the plan was made for, held, so never reused; its plan)


def _groups(attention_mask, batch: int, q_len: int, k_len: int, device) -> list[tuple]:
    """The rows grouped by how many keys and queries of their own they have: [(row index,
    key positions [rows, 1, keys, 1] or None, keys, queries, causal mask or None)]. Made once
    per forward pass (every layer gets the same mask object) and kept for its layers."""
    global _plan
    if attention_mask is not None and _plan[0] is attention_mask:
        return _plan[1]
    if attention_mask is None:
        shapes = {(k_len, q_len): list(range(batch))}
    else:
        allowed = attention_mask[:, 0, -1]
        allowed = allowed if allowed.dtype == torch.bool else allowed == 0
        shapes = {}
        own = zip(allowed.sum(1).tolist(), allowed[:, k_len - q_len:].sum(1).tolist())
        for b, shape in enumerate(own):
            shapes.setdefault(shape, []).append(b)
    plan = []
    for (n_k, n_q), rows in shapes.items():
        index = torch.tensor(rows, device=device)
        at = None
        if attention_mask is not None and n_k < k_len:  # each row's own keys, in order
            at = allowed.index_select(0, index).nonzero()[:, 1].view(len(rows), 1, n_k, 1)
        # query i sees the keys up to its own position (bottom-right causal)
        mask = (torch.ones((n_q, n_k), dtype=torch.bool, device=device).tril(n_k - n_q)
                if n_q > 1 else None)
        plan.append((index, at, n_k, n_q, mask))
    if attention_mask is not None:
        _plan = (attention_mask, plan)
    return plan


def row_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                  scaling: float | None = None, **kwargs):
    """Scaled dot-product attention of each row over the row's own keys only (those its last
    query may see: the padding dropped), each query seeing the keys up to its own position.
    Rows with as many keys and queries of their own go through one call (the kernel computes
    each row of a call alone: the tests hold a row's bits against the row run by itself).
    `query` [batch, heads, q, dim], `key`/`value` [batch, kv_heads, k, dim]; the mask as
    transformers' sdpa mask builds it (boolean, True = attend, or None: no padding). Padded
    query positions get zeros (nothing reads them). Returns ([batch, q, heads, dim], None) as
    the interface expects."""
    batch, _, q_len, _ = query.shape
    gqa = getattr(module, "num_key_value_groups", 1) > 1
    out = None
    for index, at, n_k, n_q, mask in _groups(attention_mask, batch, q_len, key.shape[2],
                                             query.device):
        whole = len(index) == batch  # every row, in order: no copies to select them
        keys = key if whole else key.index_select(0, index)
        values = value if whole else value.index_select(0, index)
        if at is not None:
            at = at.expand(-1, keys.shape[1], -1, keys.shape[3])
            keys, values = keys.gather(2, at), values.gather(2, at)
        got = torch.nn.functional.scaled_dot_product_attention(
            (query if whole else query.index_select(0, index))[:, :, q_len - n_q:], keys,
            values, attn_mask=mask, scale=scaling, enable_gqa=gqa)
        if whole and n_q == q_len:
            return got.transpose(1, 2), None
        if out is None:  # the kernel's precision (bf16 under autocast)
            out = got.new_zeros((batch, q_len, query.shape[1], query.shape[3]))
        out[index, q_len - n_q:] = got.transpose(1, 2)
    return out, None


def register() -> None:
    """Register `row_attention` (and transformers' sdpa mask for it) under `NAME`."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, row_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    _registered = True


ROWS = 32  # the most rows a linear layer's product takes in one call in invariant mode
_chunking = 0  # > 0 inside `invariant_attention` (the engine's calls): products in pieces


_varies: dict = {}  # (device type, dtype) -> whether its products depend on the row count


def _rows_vary(x) -> bool:
    """Whether this machine's products in `x`'s precision give a row other bits on more than
    `ROWS` rows than in pieces of `ROWS` (measured once per device type and precision, on the
    embedded model's two MLP shapes: yes on an Intel Xeon with AMX, in bf16 and fp32; expected
    no in bf16 on the AMD EPYC, where products on 2 to 512 rows gave the same bits)."""
    device = x.device.type
    dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
             else x.dtype)
    key = (device, dtype)
    if key not in _varies:
        g = torch.Generator().manual_seed(0)
        varies = False
        for k, n in ((576, 1536), (1536, 576)):
            a = torch.randn(3 * ROWS, k, generator=g).to(device=device, dtype=dtype)
            w = torch.randn(n, k, generator=g).to(device=device, dtype=dtype)
            whole = torch.nn.functional.linear(a, w)
            pieces = torch.cat([torch.nn.functional.linear(p, w) for p in a.split(ROWS)])
            varies = varies or not torch.equal(whole, pieces)
        _varies[key] = varies
    return _varies[key]


def _invariant_linear(plain, x):
    """`plain(x)` (a linear layer's own forward) with each row's bits independent of the others
    (the module docstring, 3 and 4): one row runs as two, and inside the engine's calls more
    than `ROWS` rows run in pieces of 2 to `ROWS` rows."""
    if x.dim() < 2:
        return plain(x)
    rows = x.numel() // max(x.shape[-1], 1)
    if rows == 1:  # one row: run it twice, keep the first
        return plain(torch.cat([x, x], dim=-2)).narrow(-2, 0, 1)
    if rows <= ROWS or not _chunking or not _rows_vary(x):
        return plain(x)
    sizes = [ROWS] * (rows // ROWS) + ([rows % ROWS] if rows % ROWS else [])
    if sizes[-1] == 1:  # no piece of one row
        sizes[-2:] = [ROWS - 1, 2]
    out = torch.cat([plain(piece) for piece in x.reshape(rows, x.shape[-1]).split(sizes)])
    return out.view(*x.shape[:-1], out.shape[-1])


def unsupported(model) -> str | None:
    """Why `model` cannot run batch-invariant here, in one line, or None."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return (f"{type(model).__name__} uses sliding-window attention, which the batch-"
                f"invariant attention does not implement")
    return None


def make_batch_invariant(model, switch: bool = True):
    """Make `model` (a transformers causal LM, in place) ready for batch-invariant forward
    passes (the module docstring): its linear layers' one-row products onto two rows, and,
    when `switch`, its attention to `row_attention` for good (else only inside
    `invariant_attention`: the engine's, so a warm-up training the engine's model in place
    runs the plain attention and a saved model names no attention of ours). Returns the
    model. Raises ValueError naming the reason where it cannot (`unsupported`)."""
    why = unsupported(model)
    if why:
        raise ValueError(why)
    register()
    if switch:
        model.set_attn_implementation(NAME)
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and not getattr(module, "_mars_invariant", False):
            module.forward = partial(_invariant_linear, module.forward)
            module._mars_invariant = True
    return model


@contextmanager
def invariant_attention(model):
    """`model`'s attention is `row_attention` inside the block, what it was after it, and its
    products on many rows run in pieces where the machine needs it (`_invariant_linear`)."""
    global _chunking
    before = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    _chunking += 1
    try:
        yield model
    finally:
        _chunking -= 1
        model.set_attn_implementation(before)


def first_turn(prompt: Sequence[int], end_ids: Collection[int]) -> int:
    """The length of `prompt`'s first turn: through its first end-of-turn token (`end_ids`: the
    engine's end-of-sequence ids, which for a chat model end a turn), when that leaves the
    prompt at least one token of its own; else 0 (no shared prefix). A function of the prompt
    alone, so a row's prefix never depends on its batch."""
    for i, token in enumerate(prompt[:-1]):
        if token in end_ids:
            return i + 1
    return 0


def wanted(setting: str, bf16: bool) -> bool:
    """`model.batch_invariant`: `on`, `off`, or `auto`: on where the engine samples in bf16
    (where a plain batch changes replies; an fp32 reply keeps its tokens, its log-probs move
    at float precision, and the invariant mode does not make fp32 bitwise either)."""
    return setting == "on" or (setting == "auto" and bf16)


def statement(engine: str, bf16: bool, invariant: bool) -> str:
    """What a run with these settings reproduces across shard layouts, engine batch sizes and
    resumes, in one line (`mars check`; docs/reliability.md "What reproduces")."""
    if engine == "vllm":
        return ("in distribution only across shard layouts and servers: vLLM batches requests as "
                "they arrive (byte for byte only with engine.vllm.launch.batch_invariant on a GPU "
                "it supports; a resume replays the same requests)")
    precision = "bf16" if bf16 else "fp32"
    if bf16 and invariant:
        return ("byte for byte at any shard layout, engine batch size or resume: every reply "
                "independent of its batch (model.batch_invariant, bf16)")
    if bf16:
        return ("a resume byte for byte; another shard layout or engine batch size only in "
                "distribution: bf16 replies depend on their batch (model.batch_invariant: on "
                "makes them independent)")
    return (f"a resume byte for byte; another shard layout or engine batch size the same tokens "
            f"but where a draw falls within float precision of a boundary between two tokens "
            f"({precision}: log-probs, and so checkpoint bytes, to float precision)")
