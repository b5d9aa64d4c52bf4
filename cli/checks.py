"""Checks the subcommands share. Each one reads and refuses (one line), none writes: a refused
command leaves no run folder and no config behind. The flows create what a run needs."""
from __future__ import annotations

from pathlib import Path


def check_model_spec(spec: str, flag: str, endpoint_ok: bool = True) -> None:
    from mars_core.config import ConfigError
    from mars_core.models import resolve_model
    from mars_core.engines.chat import is_endpoint
    from tasks.registry import MODEL_URI

    if is_endpoint(spec) and not endpoint_ok:
        raise ConfigError(f"{flag}: an endpoint URL cannot play games here; give a model folder "
                          "or models:/ URI")
    if spec.startswith("models:/"):
        if not MODEL_URI.match(spec):
            raise ConfigError(f"{flag}: bad model URI {spec!r}: use models:/NAME@ALIAS or "
                              "models:/NAME/VERSION")
    elif not is_endpoint(spec) and spec != "embedded":
        resolve_model(spec)


def check_cluster(address: str | None) -> None:
    """A Ray address that does not answer is one line now, before anything is written."""
    if address is not None:
        from tasks.shards import reachable

        reachable(address)


def check_preset(preset: str, overlays, overrides, run_dir: Path) -> None:
    """A training preset (with its overlays and overrides) that loads, a model that exists, a
    cluster that answers, and a run folder the run may use."""
    from mars_core.config import load_config
    from mars_core.models import resolve_model
    from tasks.paths import check_run_dir, lock_run_dir

    cfg = load_config(preset, overrides, overlays=overlays)
    if cfg.model.path != "embedded":
        resolve_model(cfg.model.path)
    check_cluster(cfg.cluster.ray.address)
    if run_dir.is_dir():  # a run to resume: held by this process until it exits (the flow
        lock_run_dir(run_dir)  # re-enters the lock); a new run's folder is the flow's to make
    check_run_dir(run_dir, cfg)


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
