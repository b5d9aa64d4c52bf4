"""What the `mars` command reports as one line and exit code 2 instead of a traceback: the
errors of bad input and of things that are not there, and a Prefect API that does not answer
(before a run, or lost mid-way)."""
from __future__ import annotations

from cli.services import ServiceError


def one_line_errors() -> tuple[type[BaseException], ...]:
    """The exception types whose message is the whole story (imported on use: they live in
    the modules that raise them)."""
    from eval.benchmarks import BenchmarkError
    from mars_core.config import ConfigError
    from mars_core.engines.vllm_server import VLLMError
    from mars_core.models.manifest import ManifestError
    from mars_core.models.weights import ModelError
    from mars_core.run.commit import StageError
    from tasks.paths import RunDirError
    from tasks.model_registry import RegistryError
    from tasks.shards import ClusterError
    from tasks.tracking import TrackingError

    return (ConfigError, ModelError, RunDirError, RegistryError, StageError, TrackingError,
            BenchmarkError, ClusterError, VLLMError, ServiceError, ManifestError)


def _prefect_api_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def check_prefect_api() -> bool:
    """With a Prefect server configured (PREFECT_API_URL), refuse in one line when it does not
    answer or refuses our credentials, before anything is written; True then, False without
    one (Prefect then runs a temporary local server)."""
    import httpx

    from mars_core.config import ConfigError
    from mars_core.privacy.redact import redact_text

    url = _prefect_api_url()
    if not url:
        return False
    base = url.rstrip("/")
    try:
        httpx.get(base + "/health", timeout=10).raise_for_status()
        refused = httpx.get(base + "/admin/version", headers=_prefect_auth_header(),
                            timeout=10).status_code == 401
    except httpx.HTTPError as e:
        raise ConfigError(f"the Prefect API at {redact_text(url)} does not answer ({type(e).__name__}"
                          "): start it (`mars services`) or unset PREFECT_API_URL to run with a "
                          "temporary local server") from None
    if refused:
        raise ConfigError(f"the Prefect API at {redact_text(url)} refused our credentials (401): "
                          "export PREFECT_API_AUTH_STRING as `mars services` prints it")
    return True


def _prefect_auth_header() -> dict:
    """What Prefect's own client sends: the auth string (basic), else the API key (bearer)."""
    import base64

    from prefect.settings import get_current_settings

    api = get_current_settings().api
    if api.auth_string is not None and api.auth_string.get_secret_value():
        token = base64.b64encode(api.auth_string.get_secret_value().encode()).decode()
        return {"Authorization": f"Basic {token}"}
    if api.key is not None and api.key.get_secret_value():
        return {"Authorization": f"Bearer {api.key.get_secret_value()}"}
    return {}


def prefect_outage(e: BaseException) -> str | None:
    """The one line for a run that lost its Prefect API mid-way (None: another error)."""
    import httpx

    url = _prefect_api_url()
    seen = e
    while seen is not None:
        if isinstance(seen, httpx.TransportError) or "Failed to reach API" in str(seen):
            from mars_core.privacy.redact import redact_text

            return (f"lost the Prefect API at {redact_text(url or 'the Prefect server')} mid-run "
                    f"({type(seen).__name__}); finished stages are saved: run the same command "
                    "again to resume")
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return None


def prefect_start_timeout(e: BaseException) -> str | None:
    """The one line for Prefect's temporary server not answering in time (a `mars` command
    without PREFECT_API_URL, on a loaded machine; the wait `mars` gives it:
    mars_core/run/threads.py); None: another error."""
    from mars_core.run.threads import PREFECT_STARTUP_TIMEOUT

    seen = e
    while seen is not None:
        if "Timed out while attempting to connect to ephemeral Prefect API server" in str(seen):
            from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS as wait

            return (f"Prefect's temporary API server did not answer within its {wait.value()} s "
                    f"(a busy machine?): set {PREFECT_STARTUP_TIMEOUT} higher, or start a server "
                    "(`mars services`) and set PREFECT_API_URL; then run the same command again")
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return None
