"""The warm start from demonstrations (`warmup.demonstrator`): the warm-up's examples answer
with the named bot's actions, and a config refuses a demonstrator that is no bot or does not fit
a training game."""
from __future__ import annotations

import pytest

from mars_core.config import config_from_dict
from mars_core.config.base import ConfigError
from mars_core.lab import kuhn
from mars_core.rollout.play import PromptBuilder
from mars_core.training.warmup import warmup_examples
from mars_core.types import SamplingParams


def _decisions(tokenizer, demonstrator: str, n: int = 160):
    """(card, history, action) of every warm-up example on Kuhn Poker."""
    prompts = PromptBuilder(tokenizer, "answer", False, 2048, "compact")
    out = []
    for prompt, target in warmup_examples(["kuhn_poker"], prompts, SamplingParams(), tokenizer,
                                          n, seed=3, demonstrator=demonstrator):
        text = tokenizer.decode(prompt).replace(tokenizer.eos_token, "\n")
        card, history, _ = kuhn.read_decision(text)
        out.append((card, history, tokenizer.decode(target).split("<")[1].split(">")[0]))
    return out


def test_the_examples_answer_with_the_demonstrators_play(tokenizer):
    nash, rand = _decisions(tokenizer, "bot:nash"), _decisions(tokenizer, "bot:random")
    facing = lambda ds, card: [a for c, h, a in ds if c == card and h.endswith("b")]  # noqa: E731
    # in every Nash equilibrium of Kuhn Poker, J folds to a bet and K calls it
    assert facing(nash, "J") and set(facing(nash, "J")) == {"PASS"}
    assert facing(nash, "K") and set(facing(nash, "K")) == {"BET"}
    assert set(facing(rand, "J")) == {"PASS", "BET"}  # the random bot: either


@pytest.mark.parametrize("demonstrator, why", [
    ("self", "is no bot"), ("bot:mcts-100", "hidden"), ("bot:nope", "unknown")])
def test_a_demonstrator_that_cannot_demonstrate_is_refused(demonstrator, why):
    cfg = {"rollout": {"games": ["kuhn_poker"]},
           "warmup": {"steps": 4, "demonstrator": demonstrator}}
    with pytest.raises((ConfigError, ValueError), match=f"warmup.demonstrator.*{why}"):
        config_from_dict(cfg)
    config_from_dict({**cfg, "warmup": {"steps": 0, "demonstrator": demonstrator}})  # unused
    config_from_dict({**cfg, "warmup": {"steps": 4, "demonstrator": "bot:nash"}})
