"""The one place that builds an engine for a model spec.

Every caller (the training stages, the game evaluation, the arena, the reasoning
benchmarks) asks here, so which engine a spec gets is decided once:
- `backend="hf"`: the in-process transformers engine on the weights of a local model folder;
- `backend="vllm"`: the caller's vLLM client (`vllm(model)`: the run's servers, which live in
  the task layer with their processes and Ray actors), made to serve the weights at `model`;
- `chat=True`: a chat engine (`mars_core.engines.chat`): an endpoint URL (`http://host:port`,
  `#NAME` picks a served model) is an OpenAI-compatible client, a folder the transformers
  engine behind its chat template.
GPU libraries load only when an engine is built.
"""
from __future__ import annotations

from typing import Callable


def build_engine(model: str, *, batch_size: int, bf16: bool, share_prefix: bool = True,
                 backend: str = "hf", vllm: Callable[[str], object] | None = None,
                 chat: bool = False, api_key: str | None = None, int8: bool = False,
                 batch_invariant: bool = False, fp32_weights: bool = False):
    """The engine that samples from `model` (see the module docstring). `batch_size` is the
    in-process engine's batch (an endpoint gets 8 times as many concurrent requests), `bf16`
    whether it samples under bf16 autocast, `api_key` the bearer key an endpoint gets, `int8`
    whether the in-process engine runs dynamic int8 linear layers (`rollout.int8`),
    `batch_invariant` whether its replies are independent of their batch
    (`mars_core.models.invariant`), `fp32_weights` whether the in-process engine keeps its
    weights in fp32 under bf16 autocast (its model trained in place: `HFEngine.from_path`)."""
    if chat:
        from mars_core.engines.chat import HFChatEngine, OpenAIChatEngine, is_endpoint

        if is_endpoint(model):
            url, _, name = model.partition("#")
            return OpenAIChatEngine(url, name or None, api_key=api_key,
                                    max_concurrency=max(batch_size * 8, 1))
        return HFChatEngine(build_engine(model, batch_size=batch_size, bf16=bf16,
                                         batch_invariant=batch_invariant))
    if backend == "vllm":  # (`int8` with vLLM is refused by the config)
        if vllm is None:
            raise ValueError("backend 'vllm' needs the run's vLLM client (vllm=...)")
        engine = vllm(model)
        engine.serve(model)
        return engine
    from mars_core.engines.hf import HFEngine

    return HFEngine.from_path(model, batch_size=batch_size, autocast_bf16=bf16,
                              share_prefix=share_prefix, int8=int8,
                              batch_invariant=batch_invariant and not int8,
                              fp32_weights=fp32_weights)
