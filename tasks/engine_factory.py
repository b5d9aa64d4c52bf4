"""The engine factory: the engine that samples from a policy (in process, or the run's vLLM
servers), its precision, prompts and sampling settings, as a run's config sets them."""
from __future__ import annotations

from pathlib import Path

from mars_core.config import Config
from mars_core.models.precision import bf16_for
from mars_core.rollout.play import PromptBuilder
from mars_core.types import SamplingParams
from tasks.vllm_launch import vllm_engine


def bf16_wanted(setting: str, phase: str = "play") -> bool:
    """`on`, `off`, or `auto`: whichever this machine runs faster for the phase (`update` or
    `play`; mars_core.models.precision measures it once per machine)."""
    return bf16_for(setting, phase)


def use_bf16(cfg: Config, phase: str) -> bool:
    return bf16_wanted(cfg.model.bf16, phase)


def batch_invariant(setting: str, bf16: bool) -> bool:
    """`model.batch_invariant` (`auto`: where the engine samples in bf16)."""
    from mars_core.models.invariant import wanted

    return wanted(setting, bf16)


def prompt_builder(cfg: Config, tokenizer) -> PromptBuilder:
    return PromptBuilder(tokenizer, cfg.rollout.prefill, cfg.rollout.keep_history,
                         cfg.model.max_context_tokens, cfg.rollout.prompt)


def sampling(cfg: Config, seed: int, temperature: float | None = None) -> SamplingParams:
    return cfg.rollout.sampling(seed, temperature)


def make_engine(cfg: Config, path: str, backend: str | None = None, log_dir: Path | None = None,
                int8: bool = False, fp32_weights: bool = False):
    """The engine that samples from the model at `path`: in process (`hf`), or the run's vLLM
    server made to serve `path` (`vllm`; reloaded in place when it holds other weights);
    `int8`: the in-process engine on dynamic int8 layers (the training games of
    `rollout.int8`); `fp32_weights`: the in-process engine's model is trained in place (the
    format warm-up), so its weights stay fp32 under bf16 autocast."""
    from mars_core.engines.build import build_engine

    bf16 = use_bf16(cfg, "play")
    return build_engine(path, backend=backend or cfg.engine.backend,
                        vllm=lambda p: vllm_engine(cfg, p, log_dir),
                        batch_size=cfg.rollout.engine_batch_size, bf16=bf16,
                        share_prefix=cfg.model.share_prefix, int8=int8,
                        batch_invariant=batch_invariant(cfg.model.batch_invariant, bf16),
                        fp32_weights=fp32_weights)
