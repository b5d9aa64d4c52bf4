"""What every task shares: the resumable stage runner and the run's policy/engine builders."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from mars_core.config import Config
from mars_core.rollout import PromptBuilder
from mars_core.stages import is_done, read_json, stage_output, write_json
from mars_core.trainer import bf16_supported
from mars_core.types import SamplingParams
from tasks.paths import checkpoint_dir, stage_dir
from tasks.tracking import log_metrics_once

METRICS = "metrics.json"


def run_stage(run_dir: Path, k: int | str, stage: str, body: Callable[[Path], dict],
              step: int | None) -> dict:
    """Run `body(out_dir) -> metrics` unless the stage already finished, then log its metrics
    (with `time/<stage>`) at `step` exactly once. Returns the metrics."""
    final = stage_dir(run_dir, k, stage)
    if not is_done(final):
        start = time.perf_counter()
        with stage_output(final) as out:
            metrics = body(out)
            metrics[f"time/{stage}"] = time.perf_counter() - start
            write_json(out / METRICS, metrics)
            _fault_pause(f"{stage}:{k}", out)
    metrics = read_json(final / METRICS)
    if step is not None:
        log_metrics_once(run_dir, metrics, step)
    return metrics


def _fault_pause(where: str, out: Path) -> None:
    """Crash-test hook: with MARS_FAULT_PAUSE=<stage>:<k>, stop inside that stage (its work
    done, its marker not yet written) and wait to be killed. Unset in normal use."""
    if os.environ.get("MARS_FAULT_PAUSE") == where:
        (out / "PAUSED").write_text(where)
        time.sleep(3600)


def bf16_wanted(setting: str) -> bool:
    """`on`, `off`, or `auto` (where the CPU/GPU supports bf16 autocast)."""
    return setting == "on" or (setting == "auto" and bf16_supported())


def use_bf16(cfg: Config) -> bool:
    return bf16_wanted(cfg.model.bf16)


def initial_policy(run_dir: Path) -> str:
    """The policy RL starts from (the warmed-up model where there is a warm-up)."""
    return read_json(stage_dir(run_dir, "init", "prepare_policy") / "policy.json")["path"]


def policy_at(run_dir: Path, k: int) -> str:
    """The policy that plays iteration k: the start policy, or the checkpoint of k-1."""
    return initial_policy(run_dir) if k == 0 else str(checkpoint_dir(run_dir, k - 1))


def frozen_snapshots(run_dir: Path, k: int) -> dict[str, str]:
    """Frozen opponents available to iteration k: the start policy and every earlier
    checkpoint, before the current policy (k-1), whose weights are still on disk
    (`checkpoint.keep_last` / `keep_every`). Label -> model folder."""
    snapshots = {"start": initial_policy(run_dir)}
    for j in range(k - 1):
        folder = checkpoint_dir(run_dir, j)
        if any(folder.glob("*.safetensors")):
            snapshots[f"iter_{j:04d}"] = str(folder)
    return snapshots


def prompt_builder(cfg: Config, tokenizer) -> PromptBuilder:
    return PromptBuilder(tokenizer, cfg.rollout.prefill, cfg.rollout.keep_history,
                         cfg.model.max_context_tokens)


def sampling(cfg: Config, seed: int, temperature: float | None = None) -> SamplingParams:
    return cfg.rollout.sampling(seed, temperature)


def make_engine(cfg: Config, path: str, backend: str | None = None, log_dir: Path | None = None):
    """The engine that samples from the model at `path`: in process (`hf`), or the run's vLLM
    server made to serve `path` (`vllm`; reloaded in place when it holds other weights)."""
    if (backend or cfg.engine.backend) == "vllm":
        engine = vllm_engine(cfg, path, log_dir)
        engine.serve(path)
        return engine
    from mars_core.engines.hf import HFEngine

    return HFEngine.from_path(path, batch_size=cfg.rollout.engine_batch_size,
                              autocast_bf16=use_bf16(cfg), share_prefix=cfg.model.share_prefix)


_VLLM_ENGINES: dict[str, object] = {}  # engine.vllm settings -> its engine, one per process


def vllm_engine(cfg: Config, path: str, log_dir: Path | None = None):
    """The process's client of the vLLM server `engine.vllm` describes: the server at `url`,
    or one we start on first use (with the weights at `path`) and keep for every later stage
    and iteration until `shutdown_engines`."""
    from mars_core.engines.vllm_server import VLLMEngine, VLLMServer, free_port, launch_command
    from mars_core.models import load_tokenizer

    v = cfg.engine.vllm
    key = v.model_dump_json()
    if key not in _VLLM_ENGINES:
        served, server = None, None
        url = v.url
        if url is None:
            lv = v.launch
            cmd = launch_command(str(Path(lv.python).absolute()), str(Path(path).resolve()),
                                 port=lv.port or free_port(lv.host), host=lv.host, dtype=lv.dtype,
                                 max_model_len=cfg.model.max_context_tokens,
                                 gpu_memory_utilization=lv.gpu_memory_utilization,
                                 seed=cfg.run.seed, enforce_eager=lv.enforce_eager,
                                 extra_args=tuple(lv.extra_args))
            server = VLLMServer(cmd, env=lv.env, startup_timeout_s=lv.startup_timeout_s,
                                log_path=Path(log_dir) / "vllm_server.log" if log_dir else None)
            print(f"starting the vLLM server (log: {server.log_path})", flush=True)
            url, served = server.start(), path
        engine = VLLMEngine(url, load_tokenizer(path), max_concurrency=v.max_concurrency,
                            timeout_s=v.request_timeout_s, served=served, server=server)
        _VLLM_ENGINES[key] = engine
    return _VLLM_ENGINES[key]


def shutdown_engines() -> None:
    """Stop the vLLM servers this process started (servers given by URL keep running)."""
    while _VLLM_ENGINES:
        _, engine = _VLLM_ENGINES.popitem()
        if engine.server is not None:
            engine.server.stop()


def derive_seed(cfg: Config, *parts: int) -> int:
    """A reproducible seed for one stage of one iteration."""
    seed = cfg.run.seed
    for p in parts:
        seed = (seed * 1_000_003 + p) % (2**31 - 1)
    return seed
