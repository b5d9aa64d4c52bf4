"""The vLLM engine against a real vLLM server (the CPU build, in its own environment): a
rollout batch goes through it as concurrent requests with sampled-token log-probs, and the
weights a training step changed are what the server serves after the reload handshake."""
from __future__ import annotations

import pytest
import torch

from mars_core.checkpoint import save_model
from mars_core.engines.vllm_server import VLLMEngine, VLLMError
from mars_core.models import load_model
from mars_core.rollout import PromptBuilder, play_episodes
from mars_core.samplers import plan_episodes
from mars_core.trainer import Forward, Sample, sequence_logprobs, sft_steps
from mars_core.types import SamplingParams

pytestmark = pytest.mark.vllm



@pytest.fixture(scope="module")
def engine(server, tokenizer, served_model):
    return VLLMEngine(server.url, tokenizer, served=served_model)


def _hf_logprobs(model, prompt, completion, temperature, pad_id):
    sample = Sample(tuple(prompt), tuple(completion), 0.0, temperature=temperature)
    logp, _ = sequence_logprobs(model, [sample], Forward(pad_id))
    return logp[0]


def _prompt(tokenizer, text):
    chat = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                         add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(chat, add_special_tokens=False)


def test_rollout_batch_goes_through_the_server_concurrently(engine, tokenizer, served_model):
    specs = plan_episodes(["tic_tac_toe"], 8, 0, seed=3)
    params = SamplingParams(temperature=0.8, top_p=1.0, top_k=0, max_new_tokens=24, seed=5)
    episodes = play_episodes(specs, engine, PromptBuilder(tokenizer, "answer", False, 2048),
                             params, progress=False)
    assert len(episodes) == 8 and all(len(ep.outcomes) == 2 for ep in episodes)
    turns = [t for ep in episodes for t in ep.turns if t.agent == "policy"]
    assert turns and all(len(t.logprobs) == len(t.completion_ids) > 0 for t in turns)
    assert engine.stats["max_in_flight"] > 1  # every pending turn was its own request
    # without top-k/top-p the server's log-probs are the tempered full-vocabulary ones the
    # trainer recomputes
    model = load_model(served_model)
    for t in turns[:4]:
        ours = _hf_logprobs(model, t.prompt_ids, t.completion_ids, 0.8, tokenizer.pad_token_id)
        assert torch.allclose(ours, torch.tensor(t.logprobs), atol=2e-3)


def test_same_seed_same_reply_and_stop_strings(engine, tokenizer):
    prompt = _prompt(tokenizer, "Count from one to ten in words.")
    params = SamplingParams(temperature=1.0, max_new_tokens=40, stop=(" five",), seed=11)
    a, b, c = engine.generate([prompt, prompt, prompt], params)
    again = engine.generate([prompt, prompt], params)
    assert (a.token_ids, b.token_ids) == (again[0].token_ids, again[1].token_ids)
    for done in (a, b, c):
        assert done.finish_reason in ("stop", "length")
        if done.finish_reason == "stop" and " five" in done.text:
            assert done.text.endswith(" five")
    overflow = engine.generate([[1] * 4096], params)[0]
    assert overflow.finish_reason == "context_overflow" and overflow.token_ids == ()


def test_weights_changed_by_a_training_step_are_what_the_server_serves(engine, tokenizer,
                                                                       served_model, tmp_path):
    prompt = _prompt(tokenizer, "Name a colour.")
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12, seed=0)
    model = load_model(served_model)
    before = engine.generate([prompt], greedy)[0]
    old = _hf_logprobs(model, prompt, before.token_ids, 1.0, tokenizer.pad_token_id)
    assert torch.allclose(old, torch.tensor(before.logprobs), atol=2e-3)

    target = tokenizer.encode("<answer>7</answer>", add_special_tokens=False)
    sft_steps(model, [(prompt, target)], steps=2, batch_size=1, lr=1e-3,
              pad_id=tokenizer.pad_token_id, seed=0, progress=False)
    ckpt = tmp_path / "iter_0000"
    save_model(ckpt, model, tokenizer)
    assert engine.load_weights(ckpt) >= 0 and engine.served == str(ckpt.resolve())

    after = engine.generate([prompt], greedy)[0]
    new = _hf_logprobs(model, prompt, after.token_ids, 1.0, tokenizer.pad_token_id)
    assert torch.allclose(new, torch.tensor(after.logprobs), atol=2e-3)
    stale = _hf_logprobs(load_model(served_model), prompt, after.token_ids, 1.0,
                         tokenizer.pad_token_id)
    assert (stale - new).abs().max() > 0.05  # the old weights would have scored it otherwise
    engine.serve(ckpt)  # already served: no second reload
    assert engine.stats["reloads"] == 1


def test_a_missing_checkpoint_is_a_one_line_error(engine, tmp_path):
    with pytest.raises(VLLMError, match="no safetensors"):
        engine.load_weights(tmp_path / "nowhere")
