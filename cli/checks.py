"""Checks the subcommands share. Each one reads and refuses (one line), none writes: a refused
command leaves no run folder and no config behind. The flows create what a run needs."""
from __future__ import annotations

import argparse
from pathlib import Path


def check_model_spec(spec: str, flag: str, endpoint_ok: bool = True,
                     args: argparse.Namespace | None = None) -> None:
    """A model reference that resolves now, read-only: a model folder that exists and reads
    whole (`check_model_folder`), a hub id the hub has, a `models:/` URI registered in the
    tracking store that `args` names (--tracking-uri, else --runs-dir's local store)."""
    from mars_core.config import ConfigError
    from mars_core.models.weights import check_model_folder, resolve_model
    from mars_core.engines.chat import is_endpoint
    from tasks.model_registry import MODEL_URI, check_registered

    if is_endpoint(spec) and not endpoint_ok:
        raise ConfigError(f"{flag}: an endpoint URL cannot play games here; give a model folder "
                          "or models:/ URI")
    if spec.startswith("models:/"):
        if not MODEL_URI.match(spec):
            raise ConfigError(f"{flag}: bad model URI {spec!r}: use models:/NAME@ALIAS or "
                              "models:/NAME/VERSION")
        if args is not None:
            check_registered(spec, getattr(args, "tracking_uri", None),
                             getattr(args, "runs_dir", "runs"))
    elif not is_endpoint(spec) and spec != "embedded":
        check_model_folder(resolve_model(spec))


def check_cluster(cluster) -> None:
    """A Ray cluster (`cluster`: a ClusterConfig, or only its address; None: no cluster) that
    is unusable is one line now, before anything is written: an address that does not answer,
    Prefect's temporary server in place of a configured one, a port that answers but is not
    Ray's. Then this process connects (`tasks.shards.connect`, with the cluster's runtime env)
    and keeps the connection for the run, as the flows would have."""
    from mars_core.config.cluster import ClusterConfig

    if not isinstance(cluster, ClusterConfig):
        cluster = ClusterConfig(ray={"address": cluster})
    address = cluster.ray.address
    if address is None:
        return
    from tasks.shards import connect, reachable

    reachable(address)
    check_prefect_server(address)
    connect(cluster)


def check_prefect_server(address: str) -> None:
    """The shards on a Ray cluster report to the flow's Prefect API from their own nodes: a
    Prefect server must be configured (PREFECT_API_URL). Without one, Prefect's temporary
    server listens on this machine's 127.0.0.1 only, which other nodes cannot reach. (Any
    configured server is accepted, a loopback one too: a cluster on this one machine.)"""
    from prefect.settings import PREFECT_API_URL

    from mars_core.config import ConfigError

    if not PREFECT_API_URL.value():
        raise ConfigError(f"a Ray cluster ({address}) needs a Prefect server that its nodes can "
                          "reach: PREFECT_API_URL is not set, so Prefect would run a temporary "
                          "server on 127.0.0.1 here; start one (`mars services`) and export "
                          "PREFECT_API_URL")


def check_preset(preset: str, overlays, overrides, run_dir: Path):
    """A training preset (with its overlays and overrides) that loads, a model that exists, a
    cluster that answers, and a run folder the run may use; returns the config."""
    from mars_core.config import load_config
    from mars_core.models.weights import check_model_folder, resolve_model
    from tasks.paths import check_run_dir, lock_run_dir

    cfg = load_config(preset, overrides, overlays=overlays)
    if cfg.model.path != "embedded":
        check_model_folder(resolve_model(cfg.model.path))
    check_cluster(cfg.cluster)
    if run_dir.is_dir():  # a run to resume: held by this process until it exits (the flow
        lock_run_dir(run_dir)  # re-enters the lock); a new run's folder is the flow's to make
    check_run_dir(run_dir, cfg)
    return cfg


def check_out(path: str | None, flag: str = "--out") -> None:
    """The folder an output file goes to exists (the file itself is written at the end)."""
    from mars_core.config import ConfigError

    if path and not Path(path).absolute().parent.is_dir():
        raise ConfigError(f"{flag} folder does not exist: {Path(path).parent}")


def check_at_least_one(*flags: tuple[str, int | None]) -> None:
    """`(--flag, value)` pairs: a value that is given must be 1 or more."""
    from mars_core.config import ConfigError

    for flag, value in flags:
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}")
