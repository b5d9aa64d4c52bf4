"""Shared prompt prefixes: which rows share what, and that running a prefix once changes no
number (logits, gradients, sampled tokens) beyond float summation order."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from mars_core.engines.hf import HFEngine
from mars_core.models.weights import load_model
from mars_core.models.prefix import MIN_SHARED, PrefixCache, batch_forward, plan_prefixes
from mars_core.training.trainer import enable_gradient_checkpointing
from mars_core.types import SamplingParams

RULES_X = list(range(100, 100 + 60))  # two seats' rules: 60 tokens, differing from token 40
RULES_O = RULES_X[:40] + list(range(900, 920))


def seqs():
    """Two seats, three prompts each, plus one unrelated prompt."""
    return [RULES_X + [5, 6, 7], RULES_O + [5, 8], RULES_X + [9], RULES_O + [5, 8, 9, 10],
            RULES_X + [5, 6, 11, 12], [300, 301, 302], RULES_O + [11]]


def test_plan_gives_each_seat_its_prefix_and_everyone_a_token_of_its_own():
    rows = seqs()
    plan = plan_prefixes(rows)
    assert plan == [60, 60, 60, 60, 60, 1, 60]  # the unrelated row keeps a one-token prefix
    for n, row in zip(plan, rows):
        assert 1 <= n < len(row)


def test_plan_splits_at_the_weak_link_only_when_it_pays():
    # the seats share 40 tokens; each seat shares 60 among its own rows
    rows = [RULES_X + [i] for i in range(4)] + [RULES_O + [i] for i in range(4)]
    assert plan_prefixes(rows) == [60] * 8
    # two rows per seat: one 40-token group costs less than two 60-token ones
    rows = [RULES_X + [1], RULES_X + [2], RULES_O + [3], RULES_O + [4]]
    assert plan_prefixes(rows) == [40] * 4


def test_no_plan_when_nothing_worth_sharing():
    assert plan_prefixes([[1, 2, 3], [1, 2, 4]]) == [0, 0]
    assert plan_prefixes([list(range(MIN_SHARED)) + [1]]) == [0]  # one row
    assert plan_prefixes([[7], list(range(80))]) == [0, 0]  # a one-token row: nothing to keep
    # identical rows keep what their callers read out of the prefix
    assert plan_prefixes([list(range(50))] * 3) == [49] * 3
    assert plan_prefixes([list(range(50))] * 3, own=[10, 5, 10]) == [40] * 3
    assert plan_prefixes([list(range(50))] * 3, own=[30, 5, 10]) == [0] * 3  # 20 < MIN_SHARED


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    torch.manual_seed(0)
    return load_model(tiny_model_dir)


def _logits(model, rows, share, keep=4):
    """The logits of each row's last positions that lie outside its prefix ([sum, V])."""
    own = [min(keep, len(r) - 1) for r in rows]
    logits = batch_forward(model, rows, 0, logits_to_keep=keep, own=own,
                           share_prefix=share).logits
    return torch.cat([logits[i, keep - k:] for i, k in enumerate(own)])


def test_shared_prefix_gives_the_plain_logits(tiny):
    rows = seqs()
    with torch.no_grad():
        plain, shared = _logits(tiny, rows, False), _logits(tiny, rows, True)
    assert plain.shape[0] == 4 * 6 + 2
    assert plan_prefixes(rows, [min(4, len(r) - 1) for r in rows]) == [57, 57, 57, 57, 57, 1, 57]
    assert torch.allclose(plain, shared, atol=1e-5)


def test_shared_prefix_gives_the_plain_gradients(tiny):
    rows, grads = seqs(), []
    for share in (False, True):
        model = copy.deepcopy(tiny).train()
        logits = _logits(model, rows, share)
        (logits.log_softmax(-1)[:, 7].sum()).backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        assert torch.allclose(g, grads[1][name], atol=1e-5, rtol=1e-4), name


def test_gradient_checkpointing_runs_the_plain_pass(tiny):
    """Checkpointed layers drop past_key_values: sharing must switch itself off, not cut the
    rows off their prefix."""
    model = copy.deepcopy(tiny)
    enable_gradient_checkpointing(model, True)
    model.train()
    with torch.no_grad():
        got = _logits(model, seqs(), True)
        want = _logits(tiny, seqs(), False)
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out (it runs long)
def test_engine_samples_the_same_with_and_without_sharing(embedded_dir, tokenizer):
    from mars_core.rollout.play import PromptBuilder
    from mars_core.games.registry import make_game

    game = make_game("tic_tac_toe")
    builder = PromptBuilder(tokenizer, "answer", keep_history=False)
    state = game.new_state(0)
    prompts = [builder.prompt_ids([{"role": "system", "content": game.rules(p)},
                                   {"role": "user", "content": game.observation(state, p, [])}])
               for p in (0, 1, 0, 1)]
    prompts[2] = prompts[2] + tokenizer.encode("Think.", add_special_tokens=False)
    assert max(plan_prefixes(prompts)) >= MIN_SHARED
    params = SamplingParams(temperature=0.6, top_p=0.99, top_k=100, max_new_tokens=6, seed=3)
    model = load_model(embedded_dir)
    plain = HFEngine(model, tokenizer, share_prefix=False).generate(prompts, params)
    shared = HFEngine(model, tokenizer, share_prefix=True).generate(prompts, params)
    for a, b in zip(plain, shared):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_cached_prefixes_give_the_plain_logits_and_are_reused(tiny):
    """The sampler's prefix cache: the plain pass's logits, each prefix computed once for two
    calls, and computed again for another model or after the weights changed in place."""
    rows = seqs()
    own = [min(4, len(r) - 1) for r in rows]
    cache = PrefixCache()

    def cached(model):
        out = batch_forward(model, rows, 0, logits_to_keep=4, own=own, prefix_cache=cache)
        return torch.cat([out.logits[i, 4 - k:] for i, k in enumerate(own)])

    with torch.inference_mode():
        plain = _logits(tiny, rows, False)
        assert torch.allclose(plain, cached(tiny), atol=1e-5)
        first = cache.computed
        assert torch.allclose(plain, cached(tiny), atol=1e-5)
    assert first > 0 and cache.reused == first and cache.computed == first
    model = copy.deepcopy(tiny)
    with torch.no_grad():
        cached(model)
        assert cache.computed == 2 * first  # another model
        next(model.parameters()).add_(0.5)  # a weight changed in place (an optimizer step)
        got = cached(model)
        assert cache.computed == 3 * first
        want = _logits(model, rows, False)
    assert torch.allclose(want, got, atol=1e-5) and not torch.allclose(want, plain, atol=1e-3)


@pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out (it runs long)
def test_engine_with_the_cache_samples_as_a_fresh_engine_per_call(embedded_dir, tokenizer):
    """Two calls on one engine (the second takes the seat's rules from the cache) give what
    a new engine gives for each call."""
    from mars_core.games.registry import make_game
    from mars_core.rollout.play import PromptBuilder

    game = make_game("tic_tac_toe")
    builder = PromptBuilder(tokenizer, "answer", keep_history=False)
    state = game.new_state(0)
    prompts = [builder.prompt_ids([{"role": "system", "content": game.rules(p)},
                                   {"role": "user", "content": game.observation(state, p, [])}])
               for p in (0, 1, 0)]
    params = SamplingParams(temperature=0.6, top_p=0.99, top_k=100, max_new_tokens=6, seed=3)
    model = load_model(embedded_dir)
    engine = HFEngine(model, tokenizer)
    first = engine.generate(prompts, params)
    other = dataclasses.replace(params, seed=4)
    second = engine.generate(prompts, other)
    assert engine.prefix_cache.reused == engine.prefix_cache.computed > 0
    fresh = HFEngine(model, tokenizer).generate(prompts, other)
    alone = HFEngine(model, tokenizer).generate(prompts, params)
    for a, b in zip(first + second, alone + fresh):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


def test_the_cache_keeps_to_its_token_budget(tiny):
    """Least recently used entries go while the cache holds more than `max_tokens`; the
    newest stays even when it alone is over."""
    cache = PrefixCache(max_tokens=100)
    with torch.no_grad():
        for n in (40, 50, 30):
            cache.layers(tiny, tuple(range(1, n + 1)), torch.device("cpu"))
        assert [len(k) for k in cache.entries] == [50, 30]
        cache.layers(tiny, tuple(range(1, 31)), torch.device("cpu"))  # a hit: now the newest
        cache.layers(tiny, tuple(range(2, 32)), torch.device("cpu"))
        assert [len(k) for k in cache.entries] == [30, 30]
        cache.layers(tiny, tuple(range(1, 151)), torch.device("cpu"))
    assert [len(k) for k in cache.entries] == [150]
