"""What every task shares: the resumable stage runner and the run's policy/engine builders."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from mars_core.config import Config
from mars_core.rollout import PromptBuilder
from mars_core.stages import (PUBLISHED, StageError, fault_point, is_done, read_json,
                              stage_output, verify_stage, write_json)
from mars_core.seeds import Stream, stream_seed
from mars_core.precision import bf16_for
from mars_core.types import SamplingParams
from mars_core.layout import (FINAL, GENERATE_ROLLOUTS, INIT, METRICS_FILE, POLICY_FILE,
                              PREPARE_POLICY, SAVE_CHECKPOINT, checkpoint_dir, finished_stages,
                              input_dir, iter_name, iteration_of, stage_dir)
from mars_core.checkpoint import is_heavy
from tasks.tracking import log_artifacts, log_dataset, log_metrics_once


def _publishing_failed(task, task_run, state) -> bool:
    """Retry a task only when it failed to publish to a tracking server that stayed down for
    the whole retry window: its files are committed, so the retry only publishes."""
    from tasks.tracking import TrackingError

    try:
        error = state.result(raise_on_failure=False)
    except Exception:  # noqa: BLE001 - no result to judge: do not retry
        return False
    return isinstance(error, TrackingError)


# Prefect retries for stage tasks (a finished stage is skipped, so a retry is idempotent)
PUBLISH_RETRY = dict(retries=1, retry_delay_seconds=10, retry_condition_fn=_publishing_failed)


def run_stage(run_dir: Path, k: int | str, stage: str, body: Callable[[Path], dict],
              step: int | None, artifacts: tuple[str, ...] = (), artifact_path: str = "",
              run_id: str | None = None, datasets: tuple[str, ...] = ()) -> dict:
    """Run `body(out_dir) -> metrics` unless the stage already finished, then publish it:
    its metrics (with `time/<stage>`) at `step` and the files or folders `artifacts` (names in
    the stage folder; `"."`: the whole folder) under `artifact_path`, and the Parquet tables
    `datasets` as MLflow dataset inputs, to the training run or `run_id`. Files are committed before anything is published; what was published is noted
    in the stage folder, so a resumed run publishes what is missing, once. Returns the metrics."""
    final = stage_dir(run_dir, k, stage)
    if not is_done(final):
        start = time.perf_counter()
        with stage_output(final, fault=f"{stage}:{k}") as out:
            metrics = body(out)
            metrics[f"time/{stage}"] = time.perf_counter() - start
            write_json(out / METRICS_FILE, metrics)
            _fault_pause(f"{stage}:{k}", out)
        fault_point(f"end:{stage}:{k}")
    metrics = read_json(final / METRICS_FILE)
    publish_stage(run_dir, final, metrics, step, artifacts, artifact_path, run_id, datasets)
    return metrics


def publish_stage(run_dir: Path, final: Path, metrics: dict, step: int | None,
                  artifacts: tuple[str, ...], artifact_path: str, run_id: str | None,
                  datasets: tuple[str, ...] = ()) -> None:
    """Publish a finished stage's metrics and artifacts, each once (the ledger `_PUBLISHED.json`
    in the stage folder; metric steps are checked in MLflow too)."""
    ledger_file = final / PUBLISHED
    ledger = read_json(ledger_file) if ledger_file.is_file() else {}
    wanted = ((["metrics"] if step is not None else []) + [f"artifact:{a}" for a in artifacts]
              + [f"dataset:{d}" for d in datasets])
    if all(ledger.get(w) for w in wanted):
        return
    for item in wanted:
        if ledger.get(item):
            continue
        if item == "metrics":
            log_metrics_once(run_dir, metrics, step, run_id=run_id)
        elif item.startswith("dataset:"):
            log_dataset(run_dir, final / item.removeprefix("dataset:"), final.name, run_id=run_id)
        else:
            local = final if item == "artifact:." else final / item.removeprefix("artifact:")
            if local.exists():
                log_artifacts(run_dir, local, artifact_path, run_id=run_id)
        ledger[item] = True
        write_json(ledger_file, ledger)


def check_finished_stages(run_dir: Path) -> None:
    """Before a resume: every finished stage's files against its marker (sizes; SHA-256 for the
    stages a resume reads next). The first damaged stage and everything after it are moved to
    `.damaged/<time>/` and redone; when their inputs are gone (pruned checkpoints), a
    StageError says which file is damaged."""
    stages = finished_stages(run_dir)
    if not stages:
        return
    deep = _deep_checked(stages)
    for i, folder in enumerate(stages):
        problem = verify_stage(folder, hashes=folder in deep, may_be_gone=is_heavy)
        if problem is None:
            continue
        redo = i - 1 if folder.name == SAVE_CHECKPOINT and i > 0 else i  # its train step too
        _redo_from(run_dir, stages[redo:], problem)
        return


def _deep_checked(stages: list[Path]) -> set[Path]:
    """The stages a resume reads: the start policy, the newest checkpoint, the last iteration
    and the final stages (hashing every old stage would cost more than it protects)."""
    deep = {s for s in stages if s.name == PREPARE_POLICY or s.parent.name == FINAL}
    ckpts = [s for s in stages if s.name == SAVE_CHECKPOINT]
    if ckpts:
        deep.add(ckpts[-1])
    last_iter = max((s.parent for s in stages if iteration_of(s.parent.name) is not None),
                    default=None)
    deep |= {s for s in stages if s.parent == last_iter}
    return deep


def _redo_from(run_dir: Path, stages: list[Path], problem: str) -> None:
    first = stages[0]
    k = iteration_of(first.parent.name)
    if k is not None:
        needs = checkpoint_dir(run_dir, k - 1) if k > 0 else None
        if needs is not None and not any(needs.glob("*.safetensors")):
            raise StageError(f"{problem}; redoing it needs the weights of {needs}, which were "
                             "pruned (checkpoint.keep_last): restore the file or start a new run")
    aside = Path(run_dir) / ".damaged" / time.strftime("%Y%m%d-%H%M%S")
    for folder in stages:
        target = aside / folder.relative_to(run_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder, target)
    print(f"{problem}: redoing {len(stages)} stages from {first.relative_to(run_dir)} "
          f"(the old ones are kept in {aside})", flush=True)


def _fault_pause(where: str, out: Path) -> None:
    """Crash-test hook: with MARS_FAULT_PAUSE=<stage>:<k>, stop inside that stage (its work
    done, its marker not yet written) and wait to be killed. Unset in normal use."""
    if os.environ.get("MARS_FAULT_PAUSE") == where:
        (out / "PAUSED").write_text(where)
        time.sleep(3600)


def bf16_wanted(setting: str, phase: str = "play") -> bool:
    """`on`, `off`, or `auto`: whichever this machine runs faster for the phase (`update` or
    `play`; mars_core.precision measures it once per machine)."""
    return bf16_for(setting, phase)


def use_bf16(cfg: Config, phase: str) -> bool:
    return bf16_wanted(cfg.model.bf16, phase)


def initial_policy(run_dir: Path, k: int | str, *, reader: str) -> str:
    """The policy RL starts from (the warmed-up model where there is a warm-up), as stage
    `reader` of group k reads it (a declared input: `mars_core.layout.input_dir`)."""
    init = input_dir(run_dir, k, reader=reader, stage=PREPARE_POLICY, at=INIT)
    return read_json(init / POLICY_FILE)["path"]


def policy_at(run_dir: Path, k: int, *, reader: str) -> str:
    """The policy that plays iteration k (and that its update starts from), as stage `reader`
    reads it: the start policy, or the checkpoint of k-1."""
    if k == 0:
        return initial_policy(run_dir, k, reader=reader)
    return str(input_dir(run_dir, k, reader=reader, stage=SAVE_CHECKPOINT, at=k - 1))


def frozen_snapshots(run_dir: Path, k: int) -> dict[str, str]:
    """Frozen opponents available to iteration k: the start policy and every earlier
    checkpoint, before the current policy (k-1), whose weights are still on disk
    (`checkpoint.keep_last` / `keep_every`). Label -> model folder."""
    snapshots = {"start": initial_policy(run_dir, k, reader=GENERATE_ROLLOUTS)}
    for j in range(k - 1):
        folder = input_dir(run_dir, k, reader=GENERATE_ROLLOUTS, stage=SAVE_CHECKPOINT, at=j)
        if any(folder.glob("*.safetensors")):
            snapshots[iter_name(j)] = str(folder)
    return snapshots


def prompt_builder(cfg: Config, tokenizer) -> PromptBuilder:
    return PromptBuilder(tokenizer, cfg.rollout.prefill, cfg.rollout.keep_history,
                         cfg.model.max_context_tokens)


def sampling(cfg: Config, seed: int, temperature: float | None = None) -> SamplingParams:
    return cfg.rollout.sampling(seed, temperature)


def make_engine(cfg: Config, path: str, backend: str | None = None, log_dir: Path | None = None):
    """The engine that samples from the model at `path`: in process (`hf`), or the run's vLLM
    server made to serve `path` (`vllm`; reloaded in place when it holds other weights)."""
    from mars_core.engines.build import build_engine

    return build_engine(path, backend=backend or cfg.engine.backend,
                        vllm=lambda p: vllm_engine(cfg, p, log_dir),
                        batch_size=cfg.rollout.engine_batch_size, bf16=use_bf16(cfg, "play"),
                        share_prefix=cfg.model.share_prefix)


_VLLM_ENGINES: dict[str, object] = {}  # engine.vllm settings -> its engine, one per process


def vllm_engine(cfg: Config, path: str, log_dir: Path | None = None):
    """The process's client of the vLLM servers `engine.vllm` describes: the server at `url`
    or the servers at `urls` (their API key from the environment variable `api_key_env`
    names), or `launch.replicas` servers we start on first use (with the weights at `path`
    and each a new random API key, which only its environment and our client hold) and keep
    for every later stage and iteration until `shutdown_engines`. Several servers are one
    `VLLMPool` (data parallel). Pid files: `<log_dir>/vllm_server[_i].pid`."""
    from mars_core.engines.vllm_pool import VLLMPool
    from mars_core.models import load_tokenizer

    v = cfg.engine.vllm
    key = v.model_dump_json()
    if key not in _VLLM_ENGINES:
        tokenizer = load_tokenizer(path)
        if v.url is not None or v.urls:
            api_key = os.environ.get(v.api_key_env) or None
            replicas = [_vllm_client(v, url, tokenizer, api_key) for url in v.urls or [v.url]]
        else:
            n = v.launch.replicas
            replicas = _launch_vllm(cfg, path, log_dir, tokenizer, n)
        _VLLM_ENGINES[key] = replicas[0] if len(replicas) == 1 else VLLMPool(replicas)
    return _VLLM_ENGINES[key]


def _vllm_client(v, url: str, tokenizer, api_key: str | None, served=None, server=None):
    from mars_core.engines.vllm_client import VLLMEngine

    return VLLMEngine(url, tokenizer, max_concurrency=v.max_concurrency,
                      timeout_s=v.request_timeout_s, served=served, server=server, api_key=api_key)


def _launch_vllm(cfg: Config, path: str, log_dir: Path | None, tokenizer, n: int) -> list:
    """`n` vLLM servers on the weights at `path`, started together, each with its own port,
    API key, log and pid file; all stopped again if one fails to start. With
    `cluster.ray.address` they are Ray actors, each on a node with its resources
    (`tasks/vllm_ray.py`); else processes on this machine."""
    import secrets
    from concurrent.futures import ThreadPoolExecutor

    from mars_core.engines.vllm_server import VLLMServer, launch_command
    from mars_core.procgroup import free_port

    v, lv = cfg.engine.vllm, cfg.engine.vllm.launch
    servers, keys = [], [secrets.token_urlsafe(32) for _ in range(n)]
    if cfg.cluster.ray.address is not None:  # placed by Ray, each on a node with its resources
        from tasks.vllm_ray import launch_on_ray

        print(f"starting {n} vLLM server(s) as Ray actors", flush=True)
        placed = launch_on_ray(cfg, path, log_dir, keys)
        try:
            return [_vllm_client(v, url, tokenizer, key, served=path, server=handle)
                    for (url, handle), key in zip(placed, keys)]
        except BaseException:
            for _, handle in placed:
                handle.stop()
            raise
    for i in range(n):
        name = "vllm_server" if n == 1 else f"vllm_server_{i}"
        cmd = launch_command(str(Path(lv.python).absolute()), str(Path(path).resolve()),
                             port=(lv.port + i if lv.port else free_port(lv.host)), host=lv.host,
                             dtype=lv.dtype, max_model_len=cfg.model.max_context_tokens,
                             gpu_memory_utilization=lv.gpu_memory_utilization,
                             seed=cfg.run.seed, enforce_eager=lv.enforce_eager,
                             extra_args=tuple(lv.extra_args))
        servers.append(VLLMServer(cmd, env=lv.env, startup_timeout_s=lv.startup_timeout_s,
                                  log_path=Path(log_dir) / f"{name}.log" if log_dir else None,
                                  api_key=keys[i],
                                  cpu_kv_cache_bytes=lv.cpu_kv_cache_bytes))
    print(f"starting {n} vLLM server(s) (log: {', '.join(str(s.log_path) for s in servers)})",
          flush=True)
    try:
        with ThreadPoolExecutor(max_workers=n) as pool:
            urls = list(pool.map(lambda s: s.start(), servers))
        return [_vllm_client(v, url, tokenizer, key, served=path, server=s)
                for url, s, key in zip(urls, servers, keys)]
    except BaseException:
        for s in servers:
            s.stop()
        raise


def shutdown_engines() -> None:
    """Stop the vLLM servers this process started (servers given by URL keep running)."""
    while _VLLM_ENGINES:
        _, engine = _VLLM_ENGINES.popitem()
        for server in getattr(engine, "servers", None) or [engine.server]:
            if server is not None:
                server.stop()


def derive_seed(cfg: Config, stream: Stream, k: int | None = None) -> int:
    """The run's seed for `stream` (at iteration or step `k`): `mars_core.seeds`."""
    return stream_seed(cfg.run.seed, stream, k)
