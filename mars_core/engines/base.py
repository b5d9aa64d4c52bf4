"""The engine interface: what the rollout loop needs from a text generator.

The game loop only ever calls `generate` with token-id prompts, so an in-process transformers
engine, a vLLM server engine or a scripted test policy are interchangeable.
"""
from __future__ import annotations

from typing import Protocol

from mars_core.types import Completion, SamplingParams

_SEED_MIX = 0x9E3779B97F4A7C15  # golden-ratio constant: spreads (seed, index) pairs apart


def request_seed(seed: int, index: int) -> int:
    """The sampling seed of prompt `index` in a call with `seed`: each prompt's sample depends
    on its prompt, the seed and its index only, never on batching (every engine uses this)."""
    return (int(seed) * _SEED_MIX + int(index) * 0x632BE59BD9B4E019 + 1) % (1 << 63)


def prompt_seed(params, index: int) -> int:
    """The seed of prompt `index` of a call: its own from `params.seeds` where the caller gave
    one per prompt, else `request_seed(params.seed, index)`."""
    return params.seeds[index] if params.seeds is not None else request_seed(params.seed, index)


class Engine(Protocol):
    """Batched sampler. `tokenizer` is a Hugging Face tokenizer (chat template included)."""

    tokenizer: object

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt, in order. All prompts are sampled in as few batched calls
        as the engine can manage; `params.seed` makes the result reproducible."""
        ...
