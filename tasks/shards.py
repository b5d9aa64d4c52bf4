"""Sharded work as Prefect tasks: the games of a stage split into shards (contiguous slices of
its episode plan, or groups of games), each one Prefect task run holding its own engine.

With `cluster.ray.address` the shard tasks run on that Ray cluster through prefect-ray's
`RayTaskRunner` (each asks Ray for `cpus_per_shard` / `gpus_per_shard`); without it they run
in this process, one after another, through Prefect's thread pool: the same tasks, the same
results. Either way they are task runs of the calling flow run, in the Prefect UI.

Shards that write files write them in their own folder under `<stage>.shards/` beside the
stage folder, a folder made whole by one rename: a resumed stage redoes only the shards whose
folder is missing, and the stage folder is complete only when every shard's part is in it.
"""
from __future__ import annotations

import functools
import os
import shutil
import time
from contextlib import nullcontext
from pathlib import Path

from mars_core.run import offline, threads
from mars_core.config import dump_private_config
from mars_core.run.layout import PRIVATE_CONFIG_FILE, shard_folder, shards_dir
from mars_core.config.cluster import ClusterConfig
from mars_core.privacy.private import write_private
from mars_core.privacy.redact import install_log_redaction, redact_env

REPO = Path(__file__).resolve().parents[1]
# what a shard worker needs from this process's environment (offline model hub, quiet
# telemetry, the Prefect and MLflow servers, `--verbose`, OpenMP's wait policy: a Ray worker
# starts torch in a process of Ray's, which inherits nothing from ours)
PASSED_ENV = (*offline.ENV, "MLFLOW_TRACKING_URI", "MARS_CACHE_DIR", "MARS_BF16_AUTO",
              offline.VERBOSE, *threads.THREADS)


class ClusterError(Exception):
    """The Ray cluster cannot be reached or used (one line, naming the address)."""


def shard_slices(n: int, shards: int) -> list[range]:
    """`n` items as at most `shards` contiguous, balanced, non-empty slices (one empty slice
    for no items)."""
    shards = max(1, min(shards, n))
    q, r = divmod(n, shards)
    out, start = [], 0
    for i in range(shards):
        size = q + (1 if i < r else 0)
        out.append(range(start, start + size))
        start += size
    return out


def _api_url() -> str | None:
    """The Prefect API this flow run reports to (a server, or the ephemeral one's URL), so
    that shard task runs on other machines report to it too."""
    from prefect.context import get_run_context
    from prefect.settings import PREFECT_API_URL

    try:
        return str(get_run_context().client.api_url)
    except Exception:  # not in a run: the configured server, if any
        return PREFECT_API_URL.value()


def worker_env(cluster: ClusterConfig) -> dict[str, str]:
    """Every variable the shard workers get: `PASSED_ENV`, this repository on PYTHONPATH, the
    flow's Prefect API, and `cluster.ray.env`."""
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                        if p)
    url = _api_url()
    if url:
        env["PREFECT_API_URL"] = url.rstrip("/")
    return env | dict(cluster.ray.env)


def runtime_env(cluster: ClusterConfig) -> dict:
    """Ray's runtime env for the shard workers. Ray shows a job's runtime env in its dashboard
    and state API and writes it to its logs, so `env_vars` holds only the variables redaction
    leaves as they are (`mars_core.privacy.redact.ENV_ALLOW`, URLs without credentials); the others
    (a `cluster.ray.env` HF_TOKEN, a tracking URI with a password) are set in each worker by
    its setup hook, which Ray pickles into its cluster store, not into the runtime env. (The
    Prefect API's credentials travel with each task, in prefect-ray's task context.)"""
    env = worker_env(cluster)
    shown = redact_env(env)
    out: dict = {"env_vars": {k: v for k, v in env.items() if shown[k] == v}}
    hidden = {k: v for k, v in env.items() if shown[k] != v}
    if hidden:
        hook = functools.partial(set_worker_env, hidden)
        hook.__name__ = "mars_worker_env"  # what Ray shows for the hook
        out["worker_process_setup_hook"] = hook
    return out


def set_worker_env(env: dict[str, str]) -> None:
    """A shard worker's setup hook (see `runtime_env`): its hidden variables, and log records
    redacted from here on."""
    os.environ.update(env)
    install_log_redaction()


def share_config(run_dir: Path | str, cfg) -> None:
    """A sharded run with secrets keeps its whole config in a private file (0600) beside the
    masked `config.yaml` while it goes (`tasks.paths.read_config` reads it in a shard worker
    of another process, so a sharded run plays with the same config as one process);
    `unshare_config` removes it when the run ends."""
    if cfg.cluster.sharded and cfg.has_secrets():
        write_private(Path(run_dir) / PRIVATE_CONFIG_FILE, dump_private_config(cfg))


def unshare_config(run_dir: Path | str) -> None:
    (Path(run_dir) / PRIVATE_CONFIG_FILE).unlink(missing_ok=True)


def connect(cluster: ClusterConfig) -> None:
    """Connect this process to the Ray cluster once, for its whole life: prefect-ray's runner
    then uses the connection instead of opening (and closing) one per stage, and Ray reuses
    its idle workers, already past their imports, for the next stage's shards."""
    import ray

    if ray.is_initialized():
        return
    reachable(cluster.ray.address)
    answers_as_ray(cluster.ray.address)  # ray.init would wait for minutes on another port
    try:
        ray.init(address=cluster.ray.address, runtime_env=runtime_env(cluster),
                 logging_level="ERROR")
    except (ConnectionError, RuntimeError) as e:
        raise ClusterError(f"cannot reach the Ray cluster at {cluster.ray.address!r} "
                           f"(cluster.ray.address): {str(e).strip().splitlines()[0]}") from None


def reachable(address: str, timeout_s: float = 5) -> None:
    """A `host:port` or `ray://host:port` address answers on TCP, else one ClusterError line
    at once (Ray itself retries for minutes)."""
    import socket

    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as e:
        why = "not host:port" if isinstance(e, ValueError) else (e.strerror or type(e).__name__)
        raise ClusterError(f"cannot reach the Ray cluster at {address!r} (cluster.ray.address): "
                           f"{why}") from None


def answers_as_ray(address: str, timeout_s: float = 10) -> None:
    """What answers at `address` is a Ray cluster (a head's GCS for `host:port`, the client
    server for `ray://`): one gRPC call, answered or refused within `timeout_s`; else one
    ClusterError line at once. (`ray.init` on a port that answers but is not Ray's waits for
    minutes, retrying.)"""
    try:
        import grpc
        from ray._private.grpc_utils import init_grpc_channel
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # another Ray's layout: ray.init decides
        return
    if address == "auto":
        return
    client = address.startswith("ray://")
    target = address.removeprefix("ray://") if client else canonicalize_bootstrap_address(address)
    channel = init_grpc_channel(target)
    try:
        if client:
            from ray.core.generated import ray_client_pb2 as pb, ray_client_pb2_grpc as rpc

            rpc.RayletDriverStub(channel).ClusterInfo(
                pb.ClusterInfoRequest(type=pb.ClusterInfoType.PING), timeout=timeout_s)
        else:
            from ray.core.generated import gcs_service_pb2 as pb, gcs_service_pb2_grpc as rpc

            rpc.NodeInfoGcsServiceStub(channel).GetClusterId(pb.GetClusterIdRequest(),
                                                             timeout=timeout_s)
    except grpc.RpcError as e:
        code, detail = e.code(), (e.details() or "").strip().splitlines()[:1]
        detail = detail[0][-160:] if detail else ""
        if code == grpc.StatusCode.UNAUTHENTICATED:  # Ray, with token authentication
            raise ClusterError(f"the Ray cluster at {address!r} wants its authentication token "
                               f"({detail}): set RAY_AUTH_MODE=token and the cluster's token "
                               "(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
                               ) from None
        no_answer = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                     grpc.StatusCode.UNIMPLEMENTED)
        if client and code not in no_answer:
            return  # the client server answered (a refusal of its own: ray.init says which)
        raise ClusterError(f"cannot reach the Ray cluster at {address!r} (cluster.ray.address): "
                           f"what answers there is not a Ray cluster ({code.name}: {detail})"
                           ) from None
    finally:
        channel.close()


def task_runner(cluster: ClusterConfig):
    """prefect-ray's `RayTaskRunner` on `cluster.ray.address` (over this process's
    connection), else one thread here."""
    if cluster.ray.address is None:
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=1)
    from prefect_ray import RayTaskRunner

    connect(cluster)
    return RayTaskRunner(address=cluster.ray.address)


def run_shards(task, parameters: list[dict], cluster: ClusterConfig) -> list:
    """One task run of `task` per parameter set, on the cluster or here; their results in
    order (a failed shard raises its error once every shard has ended). On a cluster the
    shards are spread over its nodes (Ray's SPREAD strategy): packed, a shard placed after
    another had ended could land on the same node while the others idled."""
    if cluster.ray.address is not None:
        from prefect_ray.context import remote_options

        resources = remote_options(num_cpus=cluster.ray.cpus_per_shard,
                                   num_gpus=cluster.ray.gpus_per_shard,
                                   scheduling_strategy="SPREAD")
    else:
        resources = nullcontext()
    runner = task_runner(cluster)
    with runner, resources:
        futures = [runner.submit(task, p) for p in parameters]
        for f in futures:
            f.wait()
        return [f.result() for f in futures]


def node_id() -> str:
    """The Ray node this runs on (a shard task on a cluster), else this machine's name."""
    import socket

    import ray

    if ray.is_initialized():
        return ray.get_runtime_context().get_node_id()
    return socket.gethostname()


def write_shard(stage_folder: Path, shard: int, write) -> Path:
    """`write(tmp_folder)` fills the shard's files; the folder appears whole (one rename) or
    not at all. A shard already there is kept (written by an earlier attempt)."""
    final = shard_folder(stage_folder, shard)
    if final.is_dir():
        return final
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{time.time_ns()}")
    tmp.mkdir(parents=True)
    try:
        write(tmp)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if not final.is_dir():
            raise
    return final


def drop_shards(stage_folder: Path) -> None:
    """The shard folders, once the stage that merged them is complete."""
    shutil.rmtree(shards_dir(stage_folder), ignore_errors=True)
