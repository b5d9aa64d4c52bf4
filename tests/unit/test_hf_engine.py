"""HFEngine: reproducible sampling, exact log-probs, padding-safe batching and stop handling.

A tiny random Llama keeps the tests fast; the tokenizer is the real embedded SmolLM2 one, so
stop strings and EOS behave as in the pipeline.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import math  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from mars_core.engines.hf import HFEngine  # noqa: E402
from mars_core.models.weights import load_tokenizer, resolve_model  # noqa: E402
from mars_core.types import SamplingParams  # noqa: E402

MAX_POS = 128


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    # shared by all test modules of the session, so the GGUF is converted once
    folder = resolve_model("embedded", cache_dir=tmp_path_factory.getbasetemp() / "mars-cache")
    return load_tokenizer(folder)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_POS,
        initializer_range=0.1, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def engine(model, tokenizer):
    return HFEngine(model, tokenizer, batch_size=8)


@pytest.fixture(scope="module")
def prompts(tokenizer):
    texts = ["Hello", "Play tic-tac-toe. Your move:", "One two three four five six seven "
             "eight nine ten eleven twelve thirteen fourteen", "<answer>"]
    return [tokenizer.encode(t) for t in texts]


def sampled(**kw) -> SamplingParams:
    base = dict(temperature=0.8, top_p=0.9, top_k=50, max_new_tokens=12, seed=1)
    return SamplingParams(**{**base, **kw})


def greedy(**kw) -> SamplingParams:
    return sampled(temperature=0.0, **kw)


def test_same_seed_reproduces_and_other_seed_differs(engine, prompts):
    a = engine.generate(prompts, sampled(seed=7))
    b = engine.generate(prompts, sampled(seed=7))
    c = engine.generate(prompts, sampled(seed=8))
    assert a == b
    assert [x.token_ids for x in a] != [x.token_ids for x in c]


def test_identical_prompts_in_one_call_get_different_samples(engine, prompts):
    out = engine.generate([prompts[1]] * 4, sampled(temperature=1.0, top_k=0, top_p=1.0))
    assert len({x.token_ids for x in out}) > 1


def test_sampling_does_not_depend_on_batching(model, tokenizer, prompts):
    params = sampled(temperature=1.0)
    batched = HFEngine(model, tokenizer, batch_size=8).generate(prompts, params)
    single = HFEngine(model, tokenizer, batch_size=1).generate(prompts, params)
    assert [x.token_ids for x in batched] == [x.token_ids for x in single]


def full_forward_logprobs(model, prompt, completion, temperature):
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    logp = torch.log_softmax(logits / temperature if temperature > 0 else logits, -1)
    return logp.gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("temperature", [0.7, 1.3, 0.0])
def test_logprobs_match_a_fresh_full_forward(engine, model, prompts, temperature):
    """Untruncated, the recorded log-probs are the trainer's (one forward, tempered softmax)."""
    out = engine.generate(prompts, sampled(temperature=temperature, max_new_tokens=16, top_k=0,
                                           top_p=1.0))
    for prompt, c in zip(prompts, out):
        assert len(c.logprobs) == len(c.token_ids) > 0
        ref = full_forward_logprobs(model, prompt, c.token_ids, temperature)
        torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_truncated_logprobs_are_those_of_the_distribution_sampled_from(engine, model, prompts):
    """Under top-k/top-p the recorded log-prob is the renormalised truncated distribution's:
    log p(token) - log(kept mass) >= the untruncated log-prob (vLLM's processed_logprobs)."""
    params = sampled(temperature=1.0, max_new_tokens=16, top_k=5, top_p=0.8)
    for prompt, c in zip(prompts, engine.generate(prompts, params)):
        ids = torch.tensor([list(prompt) + list(c.token_ids)])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
        for pos, (token, lp) in enumerate(zip(c.token_ids, c.logprobs)):
            probs = torch.softmax(logits[pos], -1)
            top, order = torch.topk(probs, 5)
            top = top / top.sum()  # top-p acts on the top-k distribution, renormalised
            kept = (top.cumsum(-1) - top < 0.8) | (torch.arange(5) == 0)
            assert token in order[kept].tolist()
            want = math.log(float(top[order == token].sum()) / float(top[kept].sum()))
            assert lp == pytest.approx(want, abs=1e-4)
            assert lp >= math.log(float(probs[token])) - 1e-5


def test_batched_greedy_equals_one_at_a_time(model, tokenizer, prompts):
    params = greedy(max_new_tokens=20)
    batched = HFEngine(model, tokenizer, batch_size=8).generate(prompts, params)
    for prompt, b in zip(prompts, batched):
        alone = HFEngine(model, tokenizer, batch_size=1).generate([prompt], params)[0]
        assert alone.token_ids == b.token_ids
        assert alone.text == b.text
        torch.testing.assert_close(torch.tensor(alone.logprobs), torch.tensor(b.logprobs),
                                   atol=1e-4, rtol=0)


def test_results_come_back_in_input_order(engine, prompts):
    params = greedy(max_new_tokens=6)
    forward = engine.generate(prompts, params)
    backward = engine.generate(prompts[::-1], params)
    assert forward == backward[::-1]


def test_max_new_tokens_gives_length(engine, prompts, tokenizer):
    out = engine.generate(prompts, greedy(max_new_tokens=5))
    for c in out:
        if tokenizer.eos_token_id not in c.token_ids:
            assert c.finish_reason == "length" and len(c.token_ids) == 5


def test_stop_string_cuts_text_and_tokens(engine, tokenizer, prompts):
    full = engine.generate([prompts[1]], greedy(max_new_tokens=24))[0]
    pieces = [tokenizer.decode(full.token_ids[:n]) for n in range(len(full.token_ids) + 1)]
    # a stop string completed by token 6: the last 2 characters of the first 6 tokens' text
    n = next(n for n in range(6, len(pieces)) if len(pieces[n]) >= 2 and pieces[n][-2:]
             not in pieces[n - 1] and pieces[n][-2:].isprintable())
    stop = pieces[n][-2:]
    out = engine.generate([prompts[1]], greedy(max_new_tokens=24, stop=(stop, "@@never@@")))[0]
    assert out.finish_reason == "stop"
    assert out.text.endswith(stop) and out.text.count(stop) == 1
    assert out.token_ids == full.token_ids[:n]
    assert full.text.startswith(out.text)
    assert len(out.logprobs) == n


def test_eos_is_kept_in_tokens_not_in_text(model, tokenizer, prompts):
    eos = tokenizer.eos_token_id
    bias = torch.zeros(model.config.vocab_size)
    bias[eos] = 1e4  # make EOS the greedy choice everywhere (hook only: weights untouched)
    hook = model.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    try:
        out = HFEngine(model, tokenizer).generate(prompts[:2], greedy())
    finally:
        hook.remove()
    for c in out:
        assert c.token_ids == (eos,) and c.text == "" and c.finish_reason == "stop"


def test_context_overflow_does_not_crash(engine, prompts):
    long = list(range(100, 100 + MAX_POS + 5))
    nearly = list(range(100, 100 + MAX_POS - 3))
    out = engine.generate([prompts[0], long, nearly], greedy(max_new_tokens=10))
    assert out[1].finish_reason == "context_overflow" and out[1].token_ids == ()
    assert out[0].token_ids and out[0].finish_reason in ("stop", "length")
    assert len(out[2].token_ids) <= 3 and out[2].finish_reason in ("stop", "length")


def test_stats_count_tokens_and_time(engine, prompts):
    out = engine.generate(prompts, greedy(max_new_tokens=8))
    assert engine.stats["generated_tokens"] == sum(len(c.token_ids) for c in out)
    assert engine.stats["seconds"] > 0 and engine.tokens_per_second() > 0


def test_bf16_autocast_runs(model, tokenizer, prompts):
    out = HFEngine(model, tokenizer, autocast_bf16=True).generate(prompts, sampled())
    assert all(c.token_ids and len(c.logprobs) == len(c.token_ids) for c in out)


def test_a_bf16_engine_holds_its_linear_weights_in_bf16_and_samples_the_same_bits(
        model, tokenizer, prompts, tmp_path):
    """Under bf16 autocast the engine holds its linear layers' weights in bf16 (autocast cast
    them at every step anyway): the same tokens and log-probs to the bit as with the fp32
    weights it keeps for a warm-up that trains it in place; the tied LM head stays fp32. Nothing
    of the bf16 engine's model is left on the checkpoint file's mapping (the fp32 weights it
    cast would stay resident as file pages: 0.4 GB of the embedded model's)."""
    import gc

    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    out, dtypes, mapped = {}, {}, {}
    for fp32 in (True, False):
        engine = HFEngine.from_path(tmp_path, autocast_bf16=True, device="cpu",
                                    fp32_weights=fp32)
        gc.collect()
        mapped[fp32] = str(tmp_path / "model.safetensors") in Path("/proc/self/maps").read_text()
        linear = [m for m in engine.model.modules() if isinstance(m, torch.nn.Linear)]
        dtypes[fp32] = {m.weight.dtype for m in linear if m is not engine.model.lm_head}
        assert engine.model.lm_head.weight.dtype == torch.float32  # tied to the embedding
        out[fp32] = [(c.token_ids, c.logprobs) for c in engine.generate(prompts, sampled())]
        del engine, linear
        gc.collect()
    assert dtypes == {True: {torch.float32}, False: {torch.bfloat16}}
    assert mapped == {True: True, False: False}  # the fp32 engine reads the file in place
    assert out[True] == out[False]
    fp32_only = HFEngine.from_path(tmp_path, device="cpu")  # no autocast: fp32 kept
    assert {p.dtype for p in fp32_only.model.parameters()} == {torch.float32}


def test_top_k_and_top_p_restrict_the_support():
    from mars_core.engines.hf import sample_token

    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0, -1.0])
    gen = torch.Generator().manual_seed(0)

    def draws(**kw):
        return {sample_token(logits, sampled(temperature=1.0, **kw), gen)[0] for _ in range(300)}

    assert draws(top_k=1, top_p=1.0) == {0}
    assert draws(top_k=0, top_p=0.0) == {0}
    assert draws(top_k=3, top_p=1.0) == {0, 1, 2}
    assert draws(top_k=0, top_p=0.7) == {0, 1}  # p = .64, .24, ...: .64 < .7 so token 1 stays
    token, logprob = sample_token(logits, sampled(temperature=2.0, top_k=1), gen)
    assert (token, logprob) == (0, 0.0)  # the only token left: probability 1
    token, logprob = sample_token(logits, sampled(temperature=2.0, top_k=0, top_p=1.0), gen)
    assert logprob == pytest.approx(float(torch.log_softmax(logits / 2, -1)[token]))


@pytest.mark.parametrize("kw", [dict(temperature=0.0), dict(temperature=1.0, top_k=0, top_p=1.0),
                                dict(temperature=0.6, top_k=100, top_p=0.99),
                                dict(temperature=1.3, top_k=5, top_p=0.5),
                                dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.05),
                                dict(temperature=1.0, top_k=3, top_p=0.0)])
def test_rows_sampled_at_once_draw_what_each_row_draws_alone(kw):
    """`sample_rows` (the GPU's sampler, run here on the CPU) against `sample_token` row by
    row: the same token and log-prob for every row, each row's generator left in the same
    state; logits with ties, a -inf and a dominant token included."""
    from mars_core.engines.hf import sample_rows, sample_token

    torch.manual_seed(7)
    logits = torch.randn(16, 300) * 3
    logits[1, :10] = 5.0  # a tie at the top
    logits[2, 5] = float("-inf")
    logits[3, 42] = 60.0  # everything else underflows to probability 0
    params = sampled(**kw)
    for step in range(5):
        alone = [torch.Generator().manual_seed(100 + r + 31 * step) for r in range(16)]
        together = [torch.Generator().manual_seed(100 + r + 31 * step) for r in range(16)]
        expected = [sample_token(logits[r], params, alone[r]) for r in range(16)]
        tokens, logprobs = sample_rows(logits, params, together)
        assert tokens == [t for t, _ in expected]
        assert logprobs == pytest.approx([lp for _, lp in expected], abs=1e-5)
        assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(alone, together))


def test_the_device_sampler_gives_the_engines_completions(model, tokenizer, prompts):
    """The engine sampling every row of a step at once (as on a GPU) returns the completions
    the row-by-row CPU sampler returns."""
    rowwise = HFEngine(model, tokenizer, batch_size=3)
    batched = HFEngine(model, tokenizer, batch_size=3)
    assert not rowwise.sample_on_device
    batched.sample_on_device = True
    for params in (sampled(), greedy(), sampled(temperature=1.0, top_k=0, top_p=1.0, seed=5)):
        a, b = rowwise.generate(prompts * 2, params), batched.generate(prompts * 2, params)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        assert [c.text for c in a] == [c.text for c in b]
        for x, y in zip(a, b):
            assert y.logprobs == pytest.approx(x.logprobs, abs=1e-5)
