"""vLLM replicas placed as Ray actors, as on a real cluster: a two-node Ray cluster on this
machine whose nodes have its NETWORK address (not loopback), each node with one CPU and each
replica asking for one, so `engine.vllm.launch.replicas: 2` starts one real CPU vLLM server
per node, listening on that address. They speak TLS with a certificate made for the start
(pinned by the pipeline), every route but /health wants the key, and the weight reload works:
after a training step both serve the new weights. Shutting down stops them."""
from __future__ import annotations

import glob
import tempfile

import httpx
import pytest
import torch

from mars_core.run.checkpoint import save_model
from mars_core.config import load_config
from mars_core.engines.vllm_pool import VLLMPool
from mars_core.models.weights import load_model
from mars_core.training.trainer import Forward, Sample, sequence_logprobs
from mars_core.types import SamplingParams
from mars_core.training.warmup import sft_steps
from tests.conftest import REPO
from tests.raycluster import network_address, two_node_cluster

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]


def _prompt(tokenizer, text):
    chat = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                         add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(chat, add_special_tokens=False)


def _logprobs(model, prompt, completion, pad_id):
    logp, _ = sequence_logprobs(model, [Sample(tuple(prompt), tuple(completion), 0.0,
                                               temperature=1.0)], Forward(pad_id))
    return logp[0]


def _every_route_wants_the_key(url: str, verify, key: str) -> None:
    """Every route the server has (its OpenAPI paths, the dev-mode ones among them) answers
    401 without the key or with a wrong one; /health answers anyone; plain HTTP gets nothing."""
    ok = {"Authorization": f"Bearer {key}"}
    paths = set(httpx.get(url + "/openapi.json", headers=ok, verify=verify,
                          timeout=30).json()["paths"])
    assert {"/collective_rpc", "/reset_prefix_cache", "/sleep"} <= paths  # dev mode is on
    for path in sorted(paths - {"/health"}):
        concrete = path.replace("{", "").replace("}", "")
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            for method in ("GET", "POST"):
                r = httpx.request(method, url + concrete, headers=headers, json={},
                                  verify=verify, timeout=30)
                assert r.status_code == 401, (method, path, r.status_code)
    assert httpx.get(url + "/health", verify=verify, timeout=30).status_code == 200
    try:
        plain = httpx.get(url.replace("https://", "http://") + "/health", timeout=30)
    except httpx.HTTPError:
        plain = None
    assert plain is None or plain.status_code != 200


def test_replicas_placed_by_ray_on_a_network_address_serve_a_training_steps_weights(
        vllm_python, served_model, tokenizer, tmp_path):
    from tasks.vllm_launch import shutdown_engines, vllm_engine

    ip = network_address()
    if ip is None:
        pytest.skip("this machine has no network address besides loopback")
    tls_before = set(glob.glob(f"{tempfile.gettempdir()}/mars-vllm-tls-*"))
    with two_node_cluster(ip) as address:
        cfg = load_config(REPO / "configs/smoke.yaml", [
            f"model.path={served_model}", "model.max_context_tokens=2048", "engine.backend=vllm",
            f"engine.vllm.launch.python={vllm_python}", "engine.vllm.launch.replicas=2",
            "engine.vllm.launch.dtype=float32", "engine.vllm.launch.gpu_memory_utilization=0.1",
            "engine.vllm.launch.ray_gpus=0", "engine.vllm.launch.ray_cpus=1",
            "engine.vllm.launch.enforce_eager=true",  # no compile: less memory, sooner up
            f"cluster.ray.address={address}"])
        pool = vllm_engine(cfg, str(served_model), tmp_path)
        try:  # the servers loaded their private keys: none is left on the disk
            assert set(glob.glob(f"{tempfile.gettempdir()}/mars-vllm-tls-*")) == tls_before
            assert isinstance(pool, VLLMPool) and len(pool.replicas) == 2
            assert len({s.node for s in pool.servers}) == 2  # one per node
            assert all(url.startswith(f"https://{ip}:") for url in pool.urls), pool.urls
            for replica in pool.replicas:
                key = replica.headers["Authorization"].removeprefix("Bearer ")
                _every_route_wants_the_key(replica.url, replica.verify, key)

            prompt = _prompt(tokenizer, "Name a colour.")
            greedy = SamplingParams(temperature=0.0, max_new_tokens=12, seed=0)
            before = pool.generate([prompt] * 4, greedy)
            assert all(c.token_ids for c in before)
            model = load_model(served_model)  # a training step on the served weights
            target = tokenizer.encode("<answer>7</answer>", add_special_tokens=False)
            sft_steps(model, [(prompt, target)], steps=2, batch_size=1, lr=1e-3,
                      pad_id=tokenizer.pad_token_id, seed=0, progress=False)
            ckpt = tmp_path / "iter_0000"
            save_model(ckpt, model, tokenizer)
            pool.serve(ckpt)  # /collective_rpc on each replica, over TLS, behind the key
            assert pool.served == str(ckpt.resolve()) and pool.stats["left"] == 0
            assert pool.stats["reloads"] == 1
            served_before = list(pool.stats["per_replica"])
            after = pool.generate([prompt] * 4, greedy)
            assert all(n > m for n, m in zip(pool.stats["per_replica"], served_before))
            stale_model = load_model(served_model)
            for done in after:  # each reply is the new model's, token for token
                new = _logprobs(model, prompt, done.token_ids, tokenizer.pad_token_id)
                assert torch.allclose(new, torch.tensor(done.logprobs), atol=2e-3)
            stale = _logprobs(stale_model, prompt, after[0].token_ids, tokenizer.pad_token_id)
            new = _logprobs(model, prompt, after[0].token_ids, tokenizer.pad_token_id)
            assert (stale - new).abs().max() > 0.05  # the old weights would score it otherwise
            gone = [(r.url, r.verify) for r in pool.replicas]
        finally:
            shutdown_engines()
            import ray

            ray.shutdown()
        for url, verify in gone:  # the servers went with their actors
            with pytest.raises(httpx.HTTPError):
                httpx.get(url + "/health", verify=verify, timeout=5)
    assert set(glob.glob(f"{tempfile.gettempdir()}/mars-vllm-tls-*")) == tls_before
