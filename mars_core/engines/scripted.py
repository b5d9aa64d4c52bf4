"""A scripted engine: replies chosen by a function of the prompt text.

Used by tests and benchmarks to drive the real game loop without a model, and as the
reference "policy" when checking game logic (e.g. a random-legal or a perfect player). It
draws from no distribution, so its replies carry no log-probs: the update trains them at
importance weight 1.
"""
from __future__ import annotations

import re
from typing import Callable

from mars_core.types import Completion, SamplingParams
from mars_core.vocab import FinishReason

_LEGAL = re.compile(r"Legal actions: (.*)")
_ACTION = re.compile(r"<[^<>]*>")


def legal_actions_in(prompt_text: str) -> list[str]:
    """The legal action strings listed in the last observation of a prompt."""
    found = _LEGAL.findall(prompt_text)
    return _ACTION.findall(found[-1]) if found else []


class ScriptedEngine:
    def __init__(self, tokenizer, reply_fn: Callable[[str], str]) -> None:
        self.tokenizer = tokenizer
        self.reply_fn = reply_fn
        self.calls: list[int] = []  # batch size of each generate call

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        self.calls.append(len(prompts))
        out = []
        for ids in prompts:
            text = self.reply_fn(self.tokenizer.decode(ids))
            toks = tuple(self.tokenizer.encode(text, add_special_tokens=False))
            if len(toks) > params.max_new_tokens:
                toks = toks[: params.max_new_tokens]
                out.append(Completion(toks, (), self.tokenizer.decode(toks),
                                      FinishReason.LENGTH))
            else:
                out.append(Completion(toks, (), text, FinishReason.STOP))
        return out
