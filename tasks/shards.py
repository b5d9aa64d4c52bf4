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

import os
import shutil
import time
from contextlib import nullcontext
from pathlib import Path

from mars_core import offline
from mars_core.layout import shard_folder, shards_dir
from mars_core.config_cluster import ClusterConfig

REPO = Path(__file__).resolve().parents[1]
# what a shard worker needs from this process's environment (offline model hub, quiet
# telemetry, the Prefect and MLflow servers)
PASSED_ENV = (*offline.ENV, "MLFLOW_TRACKING_URI", "MARS_CACHE_DIR")


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
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                        if p)
    url = _api_url()
    if url:
        env["PREFECT_API_URL"] = url.rstrip("/")
    return env | dict(cluster.ray.env)


def connect(cluster: ClusterConfig) -> None:
    """Connect this process to the Ray cluster once, for its whole life: prefect-ray's runner
    then uses the connection instead of opening (and closing) one per stage, and Ray reuses
    its idle workers, already past their imports, for the next stage's shards."""
    import ray

    if ray.is_initialized():
        return
    reachable(cluster.ray.address)
    try:
        ray.init(address=cluster.ray.address, runtime_env={"env_vars": worker_env(cluster)},
                 logging_level="ERROR")
    except ConnectionError as e:
        raise ClusterError(f"cannot reach the Ray cluster at {cluster.ray.address!r} "
                           f"(cluster.ray.address): {str(e).splitlines()[0]}") from None


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
    order (a failed shard raises its error once every shard has ended)."""
    if cluster.ray.address is not None:
        from prefect_ray.context import remote_options

        resources = remote_options(num_cpus=cluster.ray.cpus_per_shard,
                                   num_gpus=cluster.ray.gpus_per_shard)
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
