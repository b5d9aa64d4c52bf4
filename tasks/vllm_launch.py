"""The vLLM launcher: the process's clients of the vLLM servers a run's `engine.vllm` names,
or starts (on this machine, or as Ray actors) and keeps for every later stage until
`shutdown_engines`."""
from __future__ import annotations

import os
from pathlib import Path

from mars_core.config import Config


_VLLM_ENGINES: dict[str, object] = {}  # engine.vllm settings -> its engine, one per process


def vllm_engine(cfg: Config, path: str, log_dir: Path | None = None):
    """The process's client of the vLLM servers `engine.vllm` describes: the server at `url`
    or the servers at `urls` (their API key from the environment variable `api_key_env`
    names), or `launch.replicas` servers we start on first use (with the weights at `path`
    and each a new random API key, which only its environment and our client hold) and keep
    for every later stage and iteration until `shutdown_engines`. Several servers are one
    `VLLMPool` (data parallel). Pid files: `<log_dir>/vllm_server[_i].pid`."""
    from mars_core.engines.vllm_pool import VLLMPool
    from mars_core.models.weights import load_tokenizer

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

    from mars_core.engines.vllm_server import VLLMServer, launch_command, server_env
    from mars_core.run.procgroup import free_port

    v, lv = cfg.engine.vllm, cfg.engine.vllm.launch
    servers, keys = [], [secrets.token_urlsafe(32) for _ in range(n)]
    env = server_env(lv.batch_invariant, lv.env)
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
        servers.append(VLLMServer(cmd, env=env, startup_timeout_s=lv.startup_timeout_s,
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
