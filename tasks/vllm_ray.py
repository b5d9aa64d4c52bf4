"""vLLM replicas placed by Ray: with `cluster.ray.address` set, each of the
`engine.vllm.launch.replicas` servers runs inside a Ray actor that asks for
`launch.ray_gpus` GPUs and `launch.ray_cpus` CPUs, so Ray puts it on a node that has them.
The server listens on that node's address, over TLS with a certificate made on the node for
that start (`mars_core.engines.vllm_tls`; the pipeline pins it, it comes back through Ray with
the URL), and every route but /health wants its key (our middleware), so its dev-mode routes,
the in-place weight reload among them, are on: the key and the reload calls never cross the
network in clear, and nobody without the key reaches them. It dies with its actor (our keeper
watches the actor's process); the pipeline's `VLLMPool` routes between them. The model folder,
the checkpoints and the log folder must be on a filesystem every node sees. The key reaches
the actor through Ray itself, whose network must be private anyway (without its token
authentication, Ray runs any code anyone who reaches it sends).
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

        from mars_core.config.engine import is_loopback
        from mars_core.engines.vllm_server import VLLMServer, launch_command
        from mars_core.engines.vllm_tls import self_signed
        from mars_core.run.procgroup import free_port

        host = ray.util.get_node_ip_address()
        self.node = ray.get_runtime_context().get_node_id()
        tls = None if is_loopback(host) else self_signed(host)
        try:
            self.server = VLLMServer(
                launch_command(**launch, host=host, port=free_port(host), tls=tls), env=env,
                startup_timeout_s=startup_timeout_s, log_path=Path(log_path), api_key=api_key,
                cpu_kv_cache_bytes=cpu_kv_cache_bytes, tls=tls)
        except BaseException:
            if tls is not None:
                tls.remove()
            raise
        self.url = self.server.start()

    def where(self) -> tuple[str, str, str | None]:
        """The server's URL, its node, and the certificate to pin (None: plain HTTP)."""
        return self.url, self.node, self.server.cert_pem

    def stop(self) -> None:
        self.server.stop()


class RemoteServer:
    """The pipeline's handle of a server in a Ray actor: `stop` ends both; `verify` is the TLS
    check of its certificate (what the client passes to httpx). Whether it is gone is not
    known from here (`gone` says None); a request it leaves unanswered says so."""

    def __init__(self, actor, url: str, node: str, cert_pem: str | None = None):
        from mars_core.engines.vllm_tls import pinned_context

        self.actor, self.url, self.node, self.cert_pem = actor, url, node, cert_pem
        self.verify = pinned_context(cert_pem) if cert_pem else True

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

    from mars_core.engines.vllm_server import server_env

    lv = cfg.engine.vllm.launch
    connect(cfg.cluster)  # kept for the process's life: the actors belong to it
    launch = {"python": str(Path(lv.python).absolute()), "model": str(Path(path).resolve()),
              "dtype": lv.dtype, "max_model_len": cfg.model.max_context_tokens,
              "gpu_memory_utilization": lv.gpu_memory_utilization, "seed": cfg.run.seed,
              "enforce_eager": lv.enforce_eager, "extra_args": tuple(lv.extra_args)}
    logs = Path(log_dir or ".").resolve()
    remote = ray.remote(num_gpus=lv.ray_gpus, num_cpus=lv.ray_cpus)(_Replica)
    env = server_env(lv.batch_invariant, lv.env)  # this node's GPU stands for theirs
    actors = [remote.remote(launch, str(logs / f"vllm_server_{i}.log"), env, key,
                            lv.cpu_kv_cache_bytes, lv.startup_timeout_s)
              for i, key in enumerate(keys)]
    handles = []
    try:
        for actor in actors:
            url, node, cert_pem = ray.get(actor.where.remote())
            handles.append((url, RemoteServer(actor, url, node, cert_pem)))
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
