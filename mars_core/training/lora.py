"""LoRA training (`trainer.lora`, peft): low-rank adapters on the start policy instead of every
weight.

One run keeps one adapter. The update of iteration k loads the start policy, attaches the
adapter as the checkpoint of k-1 left it (a fresh, zero one at k = 0) and trains only its
weights. The checkpoint it writes holds both the merged weights (a plain model folder: what
rollouts, evaluations, the registry and a vLLM server load) and the adapter (`adapter/`, what
the next update continues). The reference model of the KL term is the start policy, i.e. the
same module with its adapters switched off (`AdaptersOff`): no second copy of the weights.

Why on a CPU: with the adapters on the attention projections only, the update needs no weight
gradients for the MLPs and embeddings and its optimizer state is a few MB instead of twice
the model (measured in `bench/iteration_bench.py`).
"""
from __future__ import annotations

from pathlib import Path

import torch

ADAPTER = "adapter"  # the checkpoint's adapter folder


def attach(model, cfg, adapter: Path | None = None):
    """`model` (the start policy) with the adapter of `cfg` (`trainer.lora`): a fresh one, or
    the one saved in `adapter`, trainable either way."""
    import warnings

    from peft import LoraConfig, PeftModel, get_peft_model

    from mars_core.models.weights import LOADING

    with warnings.catch_warnings(), LOADING:  # peft 0.21 reads a property transformers 5
        # deprecates; the lock: peft builds adapter layers as transformers loads (meta device)
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
        if adapter is not None:
            return PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
        spec = LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                          target_modules=list(cfg.target_modules))
        return get_peft_model(model, spec)


class AdaptersOff(torch.nn.Module):
    """The reference model: a peft model's forward with its adapters switched off, i.e. the
    start policy, computed with the very weights the policy is built on."""

    def __init__(self, peft_model) -> None:
        super().__init__()
        self.peft_model = peft_model

    def forward(self, *args, **kwargs):
        with self.peft_model.disable_adapter():
            return self.peft_model(*args, **kwargs)


def hold_base_in_bf16(peft_model) -> int:
    """The frozen weights of the adapted linear layers (their `base_layer`s) held in bf16, for
    an update under bf16 autocast: autocast casts them to bf16 at every forward anyway (the same
    values, so the same log-probs to the bit), and holding them so drops their fp32 copies and
    the casts made again at every forward. On the demo's update (135M model, LoRA on every
    linear layer) the whole demo's peak went 3.16 -> 2.90 GiB (docs/performance.md). Returns
    how many were cast; merge the adapter into the start policy's fp32 weights, not these
    (`merge_into_start`)."""
    from mars_core.models.precision import hold_linears_in_bf16

    return hold_linears_in_bf16(peft_model, only=lambda name: name.endswith("base_layer"))


def save(folder: Path, peft_model, tokenizer) -> None:
    """The adapter into `folder/adapter`, then the merged weights and the tokenizer into
    `folder` (the peft model is spent afterwards: merging writes into its base weights)."""
    save_adapter(folder, peft_model)
    save_merged(folder, peft_model, tokenizer)


def save_adapter(folder: Path, peft_model) -> None:
    peft_model.save_pretrained(Path(folder) / ADAPTER)


def merge_into_start(folder: Path, start: Path | str, tokenizer) -> None:
    """The adapter `save_adapter` wrote into `folder`, merged into the start policy's fp32
    weights read again from `start` (after `hold_base_in_bf16`: the caller drops its bf16
    model first, so the two are never held together)."""
    from mars_core.models.weights import load_model

    save_merged(folder, attach(load_model(start), None, Path(folder) / ADAPTER), tokenizer)


def save_merged(folder: Path, peft_model, tokenizer) -> None:
    """The adapter merged into the base weights, as a plain model folder, with the tokenizer."""
    from mars_core.models.weights import hf_bars_off

    merged = peft_model.merge_and_unload()
    with hf_bars_off():
        merged.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
