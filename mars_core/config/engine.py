"""Config of the rollout engine (`engine`): the in-process transformers sampler, or a vLLM
server (its own process and environment) reached over its OpenAI-compatible API."""
from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from mars_core.config.base import OnOffAuto, _Section
from mars_core.privacy.redact import is_secret_name

GiB = 1 << 30
# set by the pipeline, never by extra_args
OWN_FLAGS = ("--host", "--port", "--api-key", "--ssl-keyfile", "--ssl-certfile")


def is_loopback(host: str) -> bool:
    """`localhost`, 127.0.0.0/8 or ::1 (brackets allowed): reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class VLLMLaunch(_Section):
    """How the pipeline starts its own vLLM server (when `engine.vllm.url` is null). The server
    runs with vLLM's dev-mode endpoints (the in-place weight reload), which vLLM leaves open to
    anyone who reaches the port: our middleware puts them behind an API key, new and random
    each start, passed in the server's environment, and the server listens on a loopback
    address; a replica placed by Ray listens on its node's address, over TLS with a
    certificate made for that start and pinned by the pipeline (`tasks/vllm_ray.py`)."""

    python: str = ".venv-vllm/bin/python"  # the vLLM environment's interpreter
    host: str = "127.0.0.1"  # loopback only: 127.0.0.0/8, ::1 or localhost
    port: int = Field(0, ge=0, le=65535)  # 0: a free port
    dtype: str = "auto"  # vLLM --dtype: auto, bfloat16, float16, float32
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)  # the GPU's share for weights + KV
    # the CPU build's KV cache (bytes; vLLM takes whole GiB: rounded up); unused on GPUs
    cpu_kv_cache_bytes: int = Field(GiB, gt=0)
    enforce_eager: bool = False  # skip torch.compile / CUDA graphs (faster start, slower run)
    startup_timeout_s: float = Field(900, gt=0)
    # servers to start (data parallel: each on its own port, one pool routes between them);
    # they share `env`: to give each its own GPU, start them yourself and list engine.vllm.urls
    replicas: int = Field(1, ge=1, le=64)
    # with cluster.ray.address: each replica is a Ray actor asking for these (Ray puts it on a
    # node that has them; it listens on that node's address, over TLS, behind its key)
    ray_gpus: float = Field(1.0, ge=0)
    ray_cpus: float = Field(1.0, ge=0)
    extra_args: list[str] = Field(default_factory=list)  # e.g. ["--tensor-parallel-size", "2"]
    # vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1, beta): a reply independent of the
    # requests batched with it; auto: on where this machine has a GPU vLLM 0.32 supports it on
    # (NVIDIA, compute capability 8.0+), else off with the reason in the log
    batch_invariant: OnOffAuto = "auto"
    env: dict[str, str] = Field(default_factory=dict)  # e.g. {"CUDA_VISIBLE_DEVICES": "1"}

    @field_validator("host")
    @classmethod
    def _loopback_only(cls, host: str) -> str:
        if not is_loopback(host):
            raise ValueError(f"{host!r} is not a loopback address: the server the pipeline starts "
                             "exposes its weight-reload endpoints, so it listens on 127.0.0.1, ::1 "
                             "or localhost only; for a remote server, start vLLM there yourself "
                             "and set engine.vllm.url")
        return host

    @field_validator("extra_args")
    @classmethod
    def _no_own_flags(cls, args: list[str]) -> list[str]:
        for a in args:
            flag = a.split("=", 1)[0]
            if flag in OWN_FLAGS:
                raise ValueError(f"{flag} is set by the pipeline (host and port: "
                                 "engine.vllm.launch.host/port; the API key and, on Ray, the "
                                 "TLS certificate: new each start)")
            if flag == "--config":  # vLLM reads more flags (the API key, the host) from that file
                raise ValueError(f"{flag}: a vLLM config file could set the flags the pipeline "
                                 "owns or a secret; give each flag in extra_args instead")
            if flag.startswith("-") and is_secret_name(flag):
                raise ValueError(f"{flag}: a secret on the server's command line shows in `ps` "
                                 "and in its log; put it in engine.vllm.launch.env instead (e.g. "
                                 "HF_TOKEN), which the server gets in its environment")
        return args


class VLLMConfig(_Section):
    url: str | None = None  # an already running server (started with VLLM_SERVER_DEV_MODE=1)
    # several running servers of the same model (data parallel; each request goes to the one
    # with the fewest outstanding); instead of `url`
    urls: list[str] = Field(default_factory=list)
    # the NAME of the environment variable holding the API key of the server at `url` (the key
    # itself never goes in a config); unset or empty: requests carry no key
    api_key_env: str = "VLLM_API_KEY"
    max_concurrency: int = Field(256, ge=1)  # requests in flight at once
    request_timeout_s: float = Field(600, gt=0)
    launch: VLLMLaunch = VLLMLaunch()

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"{name!r} is not an environment variable name (give the variable's "
                             "name, e.g. VLLM_API_KEY, never the key)")
        return name

    @model_validator(mode="after")
    def _url_shape(self):
        for name, url in [("url", self.url)] + [(f"urls[{i}]", u) for i, u in enumerate(self.urls)]:
            if url is not None and not url.startswith(("http://", "https://")):
                raise ValueError(f"engine.vllm.{name} must start with http:// or https:// "
                                 f"(got {url!r})")
        if self.url is not None and self.urls:
            raise ValueError("engine.vllm.url and engine.vllm.urls are both set: list every "
                             "server in urls")
        if len(set(self.urls)) != len(self.urls):
            raise ValueError("engine.vllm.urls names a server twice")
        return self


class EngineConfig(_Section):
    """`hf`: sampling in the pipeline's process (CPU or one GPU). `vllm`: every pending turn
    is its own request to a vLLM server, which batches them continuously; after each training
    step the server reloads the new checkpoint in place. Frozen-checkpoint opponents and the
    format warm-up always use the in-process engine."""

    backend: Literal["hf", "vllm"] = "hf"
    vllm: VLLMConfig = VLLMConfig()
