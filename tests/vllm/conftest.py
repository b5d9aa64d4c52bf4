"""The vLLM integration tests (`make test-vllm`): they need the vLLM environment that
`make vllm-env` builds, named by MARS_VLLM_PYTHON; without it they skip."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

VLLM_PYTHON = os.environ.get("MARS_VLLM_PYTHON", "")


@pytest.fixture(scope="session")
def vllm_python() -> str:
    if not (VLLM_PYTHON and os.access(VLLM_PYTHON, os.X_OK)):
        pytest.skip("no vLLM environment (MARS_VLLM_PYTHON); run `make test-vllm`")
    return VLLM_PYTHON


@pytest.fixture(scope="session")
def served_model(tmp_path_factory, embedded_dir) -> Path:
    """A private copy of the embedded model: the folder the server starts with."""
    out = tmp_path_factory.mktemp("served") / "model"
    shutil.copytree(embedded_dir, out)
    return out


@pytest.fixture(scope="module")
def server(request, vllm_python, served_model, tmp_path_factory):
    """A real vLLM CPU server on the embedded model (fp32, 2048-token context), one per test
    module: the engine tests change the weights it serves. Its KV cache is the config's
    default `engine.vllm.launch.cpu_kv_cache_bytes` (the CPU build's own default, a share of
    NUMA node 0, comes out negative on small machines); its API key is the module's `API_KEY`
    (none without one: the lm-eval and `mars eval mas` clients send no key)."""
    from mars_core.config.engine import VLLMLaunch
    from mars_core.engines.vllm_server import VLLMServer, launch_command
    from mars_core.run.procgroup import free_port

    cmd = launch_command(vllm_python, str(served_model), port=free_port(), dtype="float32",
                         max_model_len=2048, gpu_memory_utilization=0.1)
    srv = VLLMServer(cmd, log_path=tmp_path_factory.mktemp("vllm") / "server.log",
                     api_key=getattr(request.module, "API_KEY", None),
                     cpu_kv_cache_bytes=VLLMLaunch().cpu_kv_cache_bytes)
    srv.start()
    yield srv
    srv.stop()
