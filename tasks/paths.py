"""Where a run keeps its files: `runs/<run>/...`. One place, so tasks and flows agree."""
from __future__ import annotations

from pathlib import Path

from mars_core.config import Config, ConfigError, config_diff, dump_config, load_config

CONFIG_FILE = "config.yaml"


class RunDirError(Exception):
    """A run directory that cannot be used as asked (one-line message)."""


def iter_dir(run_dir: Path, k: int) -> Path:
    return Path(run_dir) / f"iter_{k:04d}"


def stage_dir(run_dir: Path, k: int | str, stage: str) -> Path:
    base = iter_dir(run_dir, k) if isinstance(k, int) else Path(run_dir) / k
    return base / stage


def checkpoint_dir(run_dir: Path, k: int) -> Path:
    """The published checkpoint of iteration k (weights, tokenizer, trainer state)."""
    return iter_dir(run_dir, k) / "save_checkpoint"


def read_config(run_dir: Path) -> Config:
    return load_config(Path(run_dir) / CONFIG_FILE)


def prepare_run_dir(run_dir: Path, cfg: Config) -> bool:
    """Create the run directory with its config, or check that an existing one was made with
    the same config. Returns True when the run already existed (a resume)."""
    run_dir = Path(run_dir)
    saved = run_dir / CONFIG_FILE
    if saved.is_file():
        try:
            old = load_config(saved)
        except ConfigError as e:
            raise RunDirError(f"run directory {run_dir} has an unreadable config: {e}") from None
        diff = config_diff(old, cfg)
        if diff:
            raise RunDirError(f"run directory {run_dir} was created with a different config "
                              f"(differs in: {', '.join(diff[:5])}); choose another --run-name")
        return True
    if run_dir.exists() and any(run_dir.iterdir()):
        raise RunDirError(f"{run_dir} exists and is not a run directory (no {CONFIG_FILE})")
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = saved.with_suffix(".tmp")
    tmp.write_text(dump_config(cfg))
    tmp.replace(saved)
    return False
