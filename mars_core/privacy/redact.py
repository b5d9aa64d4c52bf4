"""Secrets never reach a file, a table or an API: what is redacted, and how. This module is the
one redaction of the project: config files, MLflow params, tags, run names and traces, Prefect
parameters, artifacts and logs, result files and the Ray runtime env all go through it.

Masked (`***`), in any JSON-like value:
- values under a key that names a secret (token, secret, password, passphrase, api key, auth,
  credential, authorization, connection string, ...; e.g. `engine.vllm.launch.env.HF_TOKEN`,
  `PREFECT_API_AUTH_STRING`, `AZURE_STORAGE_CONNECTION_STRING`), whatever the value; a name
  ending in `_env` names an environment variable, not its value (`api_key_env` stays);
- every value of an environment mapping (a dict under `env`: `engine.vllm.launch.env`,
  `cluster.ray.env`, a worker's env) except the known-harmless names of `ENV_ALLOW`
  (`CUDA_VISIBLE_DEVICES`, `OMP_NUM_THREADS`, `HF_HOME`, ...);
- in argument lists (`extra_args`), the value after a flag that names a secret
  (`--hf-token x`, `--api-key=x`);
- in any string: credentials inside URLs (`https://user:PASSWORD@host` -> `user:***@host`),
  secret query parameters (`?api_key=...`), bearer and basic credentials, `NAME=value` and
  `--flag value` where the name is a secret's, and well-known token shapes (`hf_...`, `sk-...`).
Other values stay readable (`CUDA_VISIBLE_DEVICES: "1"` is useful in the MLflow UI). A redacted
config is still comparable: a run resumes when only a secret changed.
"""
from __future__ import annotations

import json
import logging
import re
from typing import Any, Mapping

import yaml

MASK = "***"
SECRET_NAME = re.compile(
    r"(?:^|[\W_])(?:token|secrets?|passwords?|passwd|pwd|passphrase|api[_-]?keys?|apikey|auth"
    r"|credentials?|authori[sz]ation|bearer|cookie|private[_-]?key|access[_-]?key|signing[_-]?key"
    r"|conn(?:ection)?[_-]?str(?:ing)?|dsn|signature)(?:$|[\W_])", re.I)
# a game's name, and a setting that says which kind of auth is on (RAY_AUTH_MODE=token)
_NOT_SECRET = re.compile(r"secret[_-]?mafia|auth[_-]?mode", re.I)
# environment variables whose values are harmless to show (everything else in an env mapping
# is masked): devices, threads, caches, offline flags, the servers' addresses (their URLs are
# still cleaned of credentials)
ENV_ALLOW = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "HIP_VISIBLE_DEVICES",
    "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "TOKENIZERS_PARALLELISM", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PATH",
    "LD_LIBRARY_PATH", "TMPDIR", "HOME", "HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE",
    "TRANSFORMERS_CACHE", "TORCH_HOME", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "DO_NOT_TRACK",
    "PREFECT_SERVER_ANALYTICS_ENABLED", "MLFLOW_DISABLE_TELEMETRY", "PREFECT_API_URL",
    "MLFLOW_TRACKING_URI", "MARS_CACHE_DIR", "MARS_BF16_AUTO", "MARS_BENCHMARK_DIR", "NCCL_DEBUG",
    "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE",
    "TORCH_CUDA_ARCH_LIST", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND",
    "VLLM_LOGGING_LEVEL", "VLLM_SERVER_DEV_MODE", "VLLM_USE_V1", "VLLM_WORKER_MULTIPROC_METHOD",
    "RAY_DEDUP_LOGS", "RAY_USAGE_STATS_ENABLED", "VLLM_NO_USAGE_STATS",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS"})
ENV_MAPPINGS = ("env", "env_vars", "environ", "environment")  # dict names holding variables

_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:@/\s]*):(?P<pw>[^@/\s]+)@",
                           re.I)
_QUERY_SECRET = re.compile(r"(?P<key>[?&;](?:[\w.-]*(?:token|secret|passw|api[_-]?key|apikey|"
                           r"key|sig|signature|credential|auth)[\w.-]*)=)(?P<value>[^&;#\s]+)", re.I)
_SCHEME_AUTH = re.compile(r"(?P<key>\b(?:[Bb]earer|BEARER|Basic|Token)\s+)(?P<value>[\w.~+/=-]{6,})")
# NAME=value, NAME: value, "NAME": "value", --flag value (the value is found after the match,
# so a name inside another assignment's value is still seen: `--set a.HF_TOKEN=x`)
_NAME_SEP = re.compile(r"(?<![\w.-])(?P<name>-{0,2}[A-Za-z_][\w.-]*)(?P<q>[\"']?)"
                       r"(?P<sep>\s*[=:]\s*|\s+)(?P<vq>[\"']?)")
_VALUE_END = re.compile(r"[\s,;&\"'}\])]|$")
_TOKEN_SHAPES = re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
                           r"|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9-]{10,})")


def is_secret_name(name: str) -> bool:
    """`HF_TOKEN`, `OPENAI_API_KEY`, `password`, `PREFECT_API_AUTH_STRING`, `--hf-token` yes;
    `max_new_tokens`, `author` no; a name ending in `_env` names an environment variable, not
    its value (`api_key_env: VLLM_API_KEY` stays)."""
    name = _NOT_SECRET.sub("", str(name))
    return bool(SECRET_NAME.search(name)) and not name.lower().endswith("_env")


def env_allowed(name: str) -> bool:
    """An environment variable whose value may be shown (`ENV_ALLOW`, never a secret's name)."""
    return str(name) in ENV_ALLOW and not is_secret_name(name)


def _mask_assignments(text: str) -> str:
    """`NAME=value`, `NAME: value` and `--flag value` with the value masked where NAME is a
    secret's name (`NAME value` without a dash is prose and stays)."""
    out, pos = [], 0
    for m in _NAME_SEP.finditer(text):
        name, sep, vq = m["name"], m["sep"], m["vq"]
        if (m.start() < pos or not is_secret_name(name)
                or (sep.isspace() and not name.startswith("-"))
                or (":" in sep and text.startswith("//", m.end()))):  # a URL's scheme
            continue
        if vq:
            end = text.find(vq, m.end())
            end = len(text) if end < 0 else end
        else:
            end = _VALUE_END.search(text, m.end()).start()
        if end > m.end():
            out += [text[pos:m.end()], MASK]
            pos = end
    return "".join(out) + text[pos:]


def redact_urls(text: str) -> str:
    """`text` with URL passwords and secret query parameters masked, nothing else: for the
    messages our own code words, where a flag or setting named in advice (`--mlflow-auth`,
    `RAY_AUTH_MODE=token`) is no secret but a URL it quotes may carry one."""
    if not isinstance(text, str) or not text:
        return text
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}{MASK}", text)


def redact_text(text: str) -> str:
    """`text` with URL passwords, secret query parameters, bearer/basic credentials, secret
    assignments and flags, and well-known token shapes masked."""
    if not isinstance(text, str) or not text:
        return text
    text = _SCHEME_AUTH.sub(lambda m: f"{m['key']}{MASK}", redact_urls(text))
    text = _mask_assignments(text)
    return _TOKEN_SHAPES.sub(MASK, text)


def redact_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """An environment mapping with every value masked but those of `ENV_ALLOW` (which lose
    credentials in URLs only)."""
    return {k: (redact(v, str(k)) if env_allowed(k) else _mask(v)) for k, v in env.items()}


def _mask(value: Any) -> Any:
    return value if value in (None, "", {}, []) else MASK


def _argv(items: list) -> list:
    """An argument list with the value after a secret-named flag masked (`--hf-token x`)."""
    out = list(items)
    for i, a in enumerate(out):
        if (isinstance(a, str) and a.startswith("-") and "=" not in a and is_secret_name(a)
                and i + 1 < len(out) and isinstance(out[i + 1], str)
                and not out[i + 1].startswith("-")):
            out[i + 1] = MASK
    return out


def redact(value: Any, name: str = "") -> Any:
    """A copy of a JSON-like value with every secret masked (see the module docstring)."""
    if isinstance(value, dict):
        if str(name).lower() in ENV_MAPPINGS:
            return redact_env(value)
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if name and is_secret_name(name):
            return type(value)(_mask(v) for v in value)
        masked = _argv(list(value)) if all(isinstance(v, str) for v in value) else list(value)
        return type(value)(v if v == MASK else redact_assignment(v) if isinstance(v, str)
                           else redact(v, name) for v in masked)
    if name and is_secret_name(name):
        return _mask(value)
    return redact_text(value) if isinstance(value, str) else value


def redact_assignment(item: str) -> str:
    """`key.path=value` (a `--set` override, an `--agents` entry, `--flag=value`) with the
    value masked as `redact` masks it at that path: a secret's name, or a variable of an env
    mapping outside `ENV_ALLOW` (`cluster.ray.env.FOO=x` -> `cluster.ray.env.FOO=***`)."""
    key, sep, raw = item.partition("=")
    path = [p for p in key.strip().split(".") if p]
    if not sep or not path or not re.fullmatch(r"-{0,2}[\w.-]+", key.strip()):
        return redact_text(item)
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    tree: Any = value
    for part in reversed(path):
        tree = {part: tree}
    masked = redact(tree)
    if masked == tree:
        return redact_text(item)
    for part in path:
        masked = masked[part]
    shown = masked if isinstance(masked, str) else json.dumps(masked)
    return f"{key}={shown}"


class RedactingFilter(logging.Filter):
    """A log filter that masks secrets in a record's message and traceback (`redact_text`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a bad format string is the logger's own problem
        return record
    clean = redact_text(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        text = logging.Formatter().formatException(record.exc_info)
        if redact_text(text) != text:
            record.exc_text = redact_text(text)
    elif record.exc_text:
        record.exc_text = redact_text(record.exc_text)
    return record


_FACTORY_INSTALLED = False


def install_log_redaction() -> None:
    """Every log record made in this process from now on has its secrets masked before any
    handler (the terminal, a file, Prefect's API log handler) sees it. Idempotent."""
    global _FACTORY_INSTALLED
    if _FACTORY_INSTALLED:
        return
    make = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        return redact_record(make(*args, **kwargs))

    logging.setLogRecordFactory(factory)
    _FACTORY_INSTALLED = True
