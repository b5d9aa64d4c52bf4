"""vLLM replicas placed by Ray: with `cluster.ray.address` set, each of the
`engine.vllm.launch.replicas` servers runs inside a Ray actor that asks for
`launch.ray_gpus` GPUs and `launch.ray_cpus` CPUs, so Ray puts it on a node that has them.
The server listens on that node's address (every route but /health wants its key: our
middleware) and dies with its actor (our keeper watches the actor's process); the
pipeline's `VLLMPool` routes between them. The model folder and the log folder must be on a
filesystem every node sees.
"""
from __future__ import annotations

from pathlib import Path

from mars_core.config import Config
from tasks.shards import connect


class _Replica:
    """Runs on the node Ray chose: one vLLM server, started at construction."""

    def __init__(self, launch: dict, log_path: str, env: dict, api_key: str,
                 cpu_kv_cache_bytes: int, startup_timeout_s: float):
        import ray

        from mars_core.engines.vllm_server import VLLMServer, launch_command
        from mars_core.procgroup import free_port

        host = ray.util.get_node_ip_address()
        self.node = ray.get_runtime_context().get_node_id()
        self.server = VLLMServer(launch_command(**launch, host=host, port=free_port(host)),
                                 env=env, startup_timeout_s=startup_timeout_s,
                                 log_path=Path(log_path), api_key=api_key,
                                 cpu_kv_cache_bytes=cpu_kv_cache_bytes)
        self.url = self.server.start()

    def where(self) -> tuple[str, str]:
        return self.url, self.node

    def stop(self) -> None:
        self.server.stop()


class RemoteServer:
    """The pipeline's handle of a server in a Ray actor: `stop` ends both. Whether it is gone
    is not known from here (`gone` says None); a request it leaves unanswered says so."""

    def __init__(self, actor, url: str, node: str):
        self.actor, self.url, self.node = actor, url, node

    def gone(self, wait_s: float = 0) -> str | None:
        return None

    def stop(self) -> None:
        import ray

        try:
            ray.get(self.actor.stop.remote(), timeout=60)
        except Exception:  # noqa: BLE001 (gone already: the keeper took the server with it)
            pass
        ray.kill(self.actor)


def launch_on_ray(cfg: Config, path: str, log_dir: Path | None, keys: list[str]
                  ) -> list[tuple[str, RemoteServer]]:
    """One Ray actor per key, each starting a server on the weights at `path`; returns
    (url, handle) per replica, in order. All are stopped again if one fails to start."""
    import ray

    lv = cfg.engine.vllm.launch
    connect(cfg.cluster)  # kept for the process's life: the actors belong to it
    launch = {"python": str(Path(lv.python).absolute()), "model": str(Path(path).resolve()),
              "dtype": lv.dtype, "max_model_len": cfg.model.max_context_tokens,
              "gpu_memory_utilization": lv.gpu_memory_utilization, "seed": cfg.run.seed,
              "enforce_eager": lv.enforce_eager, "extra_args": tuple(lv.extra_args)}
    logs = Path(log_dir or ".").resolve()
    remote = ray.remote(num_gpus=lv.ray_gpus, num_cpus=lv.ray_cpus)(_Replica)
    actors = [remote.remote(launch, str(logs / f"vllm_server_{i}.log"), dict(lv.env), key,
                            lv.cpu_kv_cache_bytes, lv.startup_timeout_s)
              for i, key in enumerate(keys)]
    handles = []
    try:
        for actor in actors:
            url, node = ray.get(actor.where.remote())
            handles.append((url, RemoteServer(actor, url, node)))
    except BaseException as e:
        for actor in actors:
            ray.kill(actor)
        if isinstance(e, ray.exceptions.RayError):
            from mars_core.engines.vllm_server import VLLMError

            cause = str(getattr(e, "cause", None) or e).strip().splitlines()
            raise VLLMError(f"a vLLM replica placed by Ray did not start: "
                            f"{cause[-1] if cause else type(e).__name__}") from None
        raise
    return handles
