"""vLLM data parallel against two real CPU vLLM servers: a rollout's requests go to both
(fewest outstanding first), both serve the weights of a training step after one reload call,
and when one server dies under a rollout its requests finish on the other."""
from __future__ import annotations

import pytest
import torch

from mars_core.run.checkpoint import save_model
from mars_core.config.engine import VLLMLaunch
from mars_core.engines.vllm_pool import VLLMPool
from mars_core.engines.vllm_client import VLLMEngine
from mars_core.engines.vllm_server import VLLMServer, launch_command
from mars_core.models.weights import load_model
from mars_core.run.procgroup import free_port
from mars_core.rollout.play import PromptBuilder, play_episodes
from mars_core.rollout.samplers import plan_episodes
from mars_core.training.trainer import Forward, Sample, sequence_logprobs
from mars_core.training.warmup import sft_steps
from mars_core.types import SamplingParams

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def servers(vllm_python, served_model, tmp_path_factory):
    """Two servers of the embedded model, started together."""
    from concurrent.futures import ThreadPoolExecutor

    logs = tmp_path_factory.mktemp("vllm-pool")
    made = [VLLMServer(launch_command(vllm_python, str(served_model), port=free_port(),
                                      dtype="float32", max_model_len=2048,
                                      gpu_memory_utilization=0.1),
                       log_path=logs / f"server_{i}.log",
                       cpu_kv_cache_bytes=VLLMLaunch().cpu_kv_cache_bytes) for i in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.start(), made))
        yield made
    finally:
        for s in made:
            s.stop()


@pytest.fixture(scope="module")
def pool(servers, tokenizer, served_model):
    return VLLMPool([VLLMEngine(s.url, tokenizer, served=served_model, server=s)
                     for s in servers])


def _prompt(tokenizer, text):
    chat = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                         add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(chat, add_special_tokens=False)


def test_a_rollout_is_shared_by_both_servers(pool, tokenizer):
    specs = plan_episodes(["tic_tac_toe"], 8, 0, 1)
    episodes = play_episodes(specs, pool, PromptBuilder(tokenizer),
                             SamplingParams(temperature=1.0, max_new_tokens=24, seed=3),
                             progress=False)
    assert len(episodes) == 8 and all(ep.turns for ep in episodes)
    assert all(n > 0 for n in pool.stats["per_replica"]), pool.stats
    assert pool.stats["max_in_flight"] >= 2 and pool.stats["left"] == 0


def test_both_servers_serve_the_weights_of_a_training_step(pool, tokenizer, served_model,
                                                           tmp_path):
    prompt = _prompt(tokenizer, "Name a colour.")
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12, seed=0)
    model = load_model(served_model)
    target = tokenizer.encode("<answer>7</answer>", add_special_tokens=False)
    sft_steps(model, [(prompt, target)], steps=2, batch_size=1, lr=1e-3,
              pad_id=tokenizer.pad_token_id, seed=0, progress=False)
    ckpt = tmp_path / "iter_0000"
    save_model(ckpt, model, tokenizer)
    pool.serve(ckpt)
    assert pool.served == str(ckpt.resolve()) and pool.stats["reloads"] == 1
    for replica in pool.replicas:  # each server on its own
        after = replica.generate([prompt], greedy)[0]
        sample = Sample(tuple(prompt), tuple(after.token_ids), 0.0, temperature=1.0)
        new = sequence_logprobs(model, [sample], Forward(tokenizer.pad_token_id))[0][0]
        assert torch.allclose(new, torch.tensor(after.logprobs), atol=2e-3), replica.url


def test_a_server_that_dies_mid_rollout_leaves_its_requests_to_the_other(pool, tokenizer):
    prompts = [_prompt(tokenizer, f"Count to {n}.") for n in range(12)]
    params = SamplingParams(temperature=1.0, max_new_tokens=128, seed=1)
    import threading

    killer = threading.Timer(0.5, pool.replicas[1].server.stop)
    killer.start()
    out = pool.generate(prompts, params)
    killer.join()
    assert len(out) == 12 and all(c.finish_reason in ("stop", "length") for c in out)
    assert pool.stats["left"] == 1 and pool.live == [0]
    assert pool.generate(prompts[:2], params)  # the pool goes on with one server
