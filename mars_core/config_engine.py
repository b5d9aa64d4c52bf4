"""Config of the rollout engine (`engine`): the in-process transformers sampler, or a vLLM
server (its own process and environment) reached over its OpenAI-compatible API."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mars_core.config_base import _Section


class VLLMLaunch(_Section):
    """How the pipeline starts its own vLLM server (when `engine.vllm.url` is null)."""

    python: str = ".venv-vllm/bin/python"  # the vLLM environment's interpreter
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535)  # 0: a free port
    dtype: str = "auto"  # vLLM --dtype: auto, bfloat16, float16, float32
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)  # on CPU: the share of RAM for KV
    enforce_eager: bool = False  # skip torch.compile / CUDA graphs (faster start, slower run)
    startup_timeout_s: float = Field(900, gt=0)
    extra_args: list[str] = Field(default_factory=list)  # e.g. ["--tensor-parallel-size", "2"]
    env: dict[str, str] = Field(default_factory=dict)  # e.g. {"CUDA_VISIBLE_DEVICES": "1"}


class VLLMConfig(_Section):
    url: str | None = None  # an already running server (started with VLLM_SERVER_DEV_MODE=1)
    max_concurrency: int = Field(256, ge=1)  # requests in flight at once
    request_timeout_s: float = Field(600, gt=0)
    launch: VLLMLaunch = VLLMLaunch()

    @model_validator(mode="after")
    def _url_shape(self):
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"engine.vllm.url must start with http:// or https:// (got {self.url!r})")
        return self


class EngineConfig(_Section):
    """`hf`: sampling in the pipeline's process (CPU or one GPU). `vllm`: every pending turn
    is its own request to a vLLM server, which batches them continuously; after each training
    step the server reloads the new checkpoint in place. Frozen-checkpoint opponents and the
    format warm-up always use the in-process engine."""

    backend: Literal["hf", "vllm"] = "hf"
    vllm: VLLMConfig = VLLMConfig()
