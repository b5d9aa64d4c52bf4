"""vLLM replicas placed as Ray actors: on a two-node Ray cluster on this machine (one CPU
each, each replica asking for one), `engine.vllm.launch.replicas: 2` starts one real CPU
vLLM server per node; the pool spreads a call over both; shutting down stops them."""
from __future__ import annotations

import httpx
import pytest

from mars_core.config import load_config
from mars_core.engines.vllm_pool import VLLMPool
from mars_core.types import SamplingParams
from tests.conftest import REPO
from tests.raycluster import two_node_cluster

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]


def test_two_replicas_as_ray_actors_on_two_nodes(vllm_python, served_model, tokenizer, tmp_path):
    from tasks.common import shutdown_engines, vllm_engine

    with two_node_cluster() as address:
        cfg = load_config(REPO / "configs/smoke.yaml", [
            f"model.path={served_model}", "model.max_context_tokens=2048", "engine.backend=vllm",
            f"engine.vllm.launch.python={vllm_python}", "engine.vllm.launch.replicas=2",
            "engine.vllm.launch.dtype=float32", "engine.vllm.launch.gpu_memory_utilization=0.1",
            "engine.vllm.launch.ray_gpus=0", "engine.vllm.launch.ray_cpus=1",
            f"cluster.ray.address={address}"])
        pool = vllm_engine(cfg, str(served_model), tmp_path)
        try:
            assert isinstance(pool, VLLMPool) and len(pool.replicas) == 2
            assert len({s.node for s in pool.servers}) == 2  # one per node
            chat = tokenizer.apply_chat_template([{"role": "user", "content": "Hi."}],
                                                 add_generation_prompt=True, tokenize=False)
            prompt = tokenizer.encode(chat, add_special_tokens=False)
            out = pool.generate([prompt] * 8, SamplingParams(temperature=1.0, max_new_tokens=16,
                                                             seed=2))
            assert len(out) == 8 and all(c.token_ids for c in out)
            assert all(n > 0 for n in pool.stats["per_replica"]), pool.stats
            urls = pool.urls
        finally:
            shutdown_engines()
            import ray

            ray.shutdown()
        for url in urls:  # the servers went with their actors
            with pytest.raises(httpx.HTTPError):
                httpx.get(url + "/health", timeout=5)
