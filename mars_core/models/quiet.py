"""Quiet logs: what third-party code prints on every run and that tells a user nothing (the
GGUF conversion's progress bars, DeepSpeed's "Setting accelerator to CPU ..." guess, MLflow's
"dataset source can be interpreted in multiple ways") is kept out where it starts, unless
`MARS_VERBOSE=1` (`mars ... --verbose` sets it; children inherit it): `quiet_logs`, called by
the code that would print them (`mars_core.run.offline` re-exports it for the other layers).
"""
from __future__ import annotations

import logging
import os
import warnings

VERBOSE = "MARS_VERBOSE"  # 1: the progress bars and third-party notes `quiet_logs` keeps out


def verbose() -> bool:
    """Whether the user asked for everything (`MARS_VERBOSE` set and not 0/false/no/off)."""
    return os.environ.get(VERBOSE, "").strip().lower() not in ("", "0", "false", "no", "off")


# DeepSpeed, imported by transformers' save_pretrained (through accelerate) when it is
# installed, guesses its accelerator once per process and says so as a WARNING; no GPU is
# the normal case here, and a GPU it misses shows elsewhere (the `gpu` docs, its own checks)
DEEPSPEED_LOGGER = "DeepSpeed"
DEEPSPEED_CPU_GUESS = "Setting accelerator to CPU. If you have GPU"
# MLflow registers two sources for local paths and warns that it picked one, on every dataset
MLFLOW_SOURCE_WARNING = r"The specified dataset source can be interpreted in multiple ways"


def _not_the_cpu_guess(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(DEEPSPEED_CPU_GUESS)


def quiet_logs() -> None:
    """Keep DeepSpeed's accelerator guess and MLflow's dataset-source warning out of this
    process's output (nothing imported: a filter on DeepSpeed's logger, made before DeepSpeed
    makes it, and a warnings filter); nothing when `verbose()`. Idempotent, cheap: the places
    that would print them call it."""
    if verbose():
        return
    ds = logging.getLogger(DEEPSPEED_LOGGER)  # DeepSpeed sets its level, keeps our filter
    if _not_the_cpu_guess not in ds.filters:
        ds.addFilter(_not_the_cpu_guess)
    warnings.filterwarnings("ignore", message=MLFLOW_SOURCE_WARNING, category=UserWarning)
