"""The environment every process of ours runs under: the model hub offline, telemetry off.

One place for it: the CLI sets it on itself, and every child it starts (vLLM servers, DeepSpeed
ranks, Ray shard workers, lm-eval) gets it from here.

Quiet logs too: what third-party code prints on every run and that tells a user nothing (the
GGUF conversion's progress bars, DeepSpeed's "Setting accelerator to CPU ..." guess, MLflow's
"dataset source can be interpreted in multiple ways") is kept out where it starts, unless
`MARS_VERBOSE=1` (`mars ... --verbose` sets it; children inherit it): `quiet_logs`, called by
the code that would print them (defined in `mars_core.models.quiet`, re-exported here).
"""
from __future__ import annotations

import os
from collections.abc import MutableMapping

# the quiet logs live beside the model loading that needs them first (models may not import
# run); here for every other caller
from mars_core.models.quiet import (DEEPSPEED_CPU_GUESS, DEEPSPEED_LOGGER,  # noqa: F401
                                    MLFLOW_SOURCE_WARNING, VERBOSE, _not_the_cpu_guess,
                                    quiet_logs, verbose)

# no model or dataset hub: weights and benchmarks come from local files
HUB_OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# no usage reports, no advisory chatter, no tokenizer thread pools fighting the engine's
QUIET = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
         "DO_NOT_TRACK": "1", "VLLM_NO_USAGE_STATS": "1", "TOKENIZERS_PARALLELISM": "false",
         "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
ENV = {**HUB_OFFLINE, **QUIET}


def apply(environ: MutableMapping[str, str] | None = None, hub: bool = False) -> None:
    """Set what is not set yet (a user's own value wins); `hub=True` leaves the hub reachable
    (`hf://` benchmarks from their publishers)."""
    environ = os.environ if environ is None else environ
    for key, value in (QUIET if hub else ENV).items():
        environ.setdefault(key, value)
