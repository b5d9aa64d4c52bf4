"""Settings that keep a process of ours fast, and alive, on a machine it shares (a second run,
a notebook, a browser, the test suite beside it). Imported first by every entry point, before
anything loads torch (OpenMP reads its settings once, when torch starts its thread pool; Prefect
its settings when it is imported): importing this module applies them (`apply()`), so one line
does it:

    import mars_core.run.threads  # noqa: F401  (first: before torch and Prefect load)

The `mars` command (cli/main.py), the benches (bench/*.py) and the test suite
(tests/conftest.py) do; `make` exports OMP_WAIT_POLICY too (Makefile). Every value is a default
(a value the user set wins) put in the process's environment, so every child process (the `mars
train` runs of `mars compare`, DeepSpeed ranks, Prefect's temporary server) inherits it. No
torch here: the module is imported before it.

- `OMP_WAIT_POLICY=PASSIVE`: an OpenMP thread that waits for work sleeps at once instead of
  spinning first (libgomp, torch's OpenMP on Linux: 300,000 spins by default). When another
  process wants the cores, spinning threads take CPU time from threads that have work: beside
  one other torch job, small model-shaped matmuls ran 16 it/s with the defaults and 119 with
  PASSIVE (issue 46, an AMD EPYC). On an Intel Xeon under heavy load it cost nothing per
  CPU-second (`bench/contention_bench.py`, docs/performance.md "Under CPU contention"). The
  thread count stays torch's default: one thread did the small matmul's work at half the CPU
  time there, but what it costs the update alone was not measurable.
- `PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=300`: Prefect's temporary API server (a
  `mars` command without PREFECT_API_URL) creates and migrates its database at its first
  start, and Prefect waits 20 s for it by default; on a loaded machine six `mars train` runs
  with a fresh PREFECT_HOME failed there before they began. A busy machine delays a run; it
  should not fail it. A start that still times out is reported in one line naming this setting
  (cli/errors.py).
"""
from __future__ import annotations

import os
from collections.abc import MutableMapping

# the temporary Prefect server's start timeout (prefect.settings.models.server.ephemeral)
PREFECT_STARTUP_TIMEOUT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
THREADS = {"OMP_WAIT_POLICY": "PASSIVE"}
PATIENCE = {PREFECT_STARTUP_TIMEOUT: "300"}
ENV = {**THREADS, **PATIENCE}


def apply(environ: MutableMapping[str, str] | None = None) -> None:
    """Set in `environ` (default: this process's environment) what is not set yet."""
    environ = os.environ if environ is None else environ
    for key, value in ENV.items():
        environ.setdefault(key, value)


apply()
