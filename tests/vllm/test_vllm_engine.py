"""The vLLM engine against a real vLLM server (the CPU build, in its own environment): a
rollout batch goes through it as concurrent requests with sampled-token log-probs, the
weights a training step changed are what the server serves after the reload handshake, and
the server wants its API key on every route but /health (the dev-mode ones included)."""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import httpx
import pytest
import torch

from mars_core.run.checkpoint import save_model
from mars_core.engines.vllm_client import VLLMEngine
from mars_core.engines.vllm_server import VLLMError
from mars_core.models.weights import load_model
from mars_core.rollout.play import PromptBuilder, play_episodes
from mars_core.rollout.samplers import plan_episodes
from mars_core.training.trainer import Forward, Sample, sequence_logprobs
from mars_core.training.warmup import sft_steps
from mars_core.types import SamplingParams

pytestmark = pytest.mark.vllm

API_KEY = secrets.token_urlsafe(32)  # this module's server wants it (conftest.py)


@pytest.fixture(scope="module")
def engine(server, tokenizer, served_model):
    return VLLMEngine(server.url, tokenizer, served=served_model, api_key=API_KEY)


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


def test_every_route_but_health_wants_the_key(server, engine, tokenizer):
    """vLLM's own key check leaves the dev-mode routes open; our middleware closes them."""
    for key in (None, "wrong"):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        for method, route in (("GET", "/v1/models"), ("POST", "/collective_rpc"),
                              ("POST", "/reset_prefix_cache"), ("POST", "/sleep"),
                              ("GET", "/server_info"), ("POST", "/tokenize")):
            r = httpx.request(method, server.url + route, headers=headers, json={}, timeout=30)
            assert r.status_code == 401, (key, route, r.status_code)
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    ok = {"Authorization": f"Bearer {API_KEY}"}
    assert httpx.post(server.url + "/reset_prefix_cache", headers=ok, timeout=30).status_code == 200
    with pytest.raises(VLLMError, match=r"\(401\): .* wants its API key.*api_key_env") as e:
        VLLMEngine(server.url, tokenizer)
    assert "\n" not in str(e.value) and API_KEY not in str(e.value)


def test_the_key_is_in_the_servers_environment_only(server):
    """Every process of the server's group has the key in its environment, none on its
    command line (`ps` shows that to every user); the log never shows it."""
    members = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
               and _pgid(int(p.name)) == server.process.pid]
    assert len(members) >= 3  # keeper, API server, engine core (and its worker)
    for pid in members:
        assert API_KEY.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    api_server = [p for p in members if p != server.process.pid and
                  Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1]
                  == str(server.process.pid)]  # the keeper's child
    assert f"VLLM_API_KEY={API_KEY}".encode() in Path(f"/proc/{api_server[0]}/environ").read_bytes()
    assert API_KEY not in server.log_path.read_text(errors="replace")


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_a_url_server_gets_its_key_from_the_variable_api_key_env_names(server, served_model,
                                                                          monkeypatch):
    from mars_core.config import load_config
    from tasks.vllm_launch import shutdown_engines, vllm_engine
    from tests.conftest import REPO

    cfg = load_config(str(REPO / "configs/smoke.yaml"), [
        "engine.backend=vllm", f"engine.vllm.url={server.url}",
        "engine.vllm.api_key_env=MARS_TEST_VLLM_KEY"])
    monkeypatch.delenv("MARS_TEST_VLLM_KEY", raising=False)
    with pytest.raises(VLLMError, match="wants its API key"):
        vllm_engine(cfg, str(served_model))
    monkeypatch.setenv("MARS_TEST_VLLM_KEY", API_KEY)
    engine = vllm_engine(cfg, str(served_model))
    assert engine.server is None and engine.model_name == "policy"
    assert API_KEY not in cfg.model_dump_json()  # the config names the variable only
    shutdown_engines()
    assert server.gone() is None  # a server given by URL keeps running
