"""The engine interface: what the rollout loop needs from a text generator.

The game loop only ever calls `generate` with token-id prompts, so an in-process transformers
engine, a vLLM server engine or a scripted test policy are interchangeable.
"""
from __future__ import annotations

from typing import Protocol

from mars_core.types import Completion, SamplingParams


class Engine(Protocol):
    """Batched sampler. `tokenizer` is a Hugging Face tokenizer (chat template included)."""

    tokenizer: object

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt, in order. All prompts are sampled in as few batched calls
        as the engine can manage; `params.seed` makes the result reproducible."""
        ...
