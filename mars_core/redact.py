"""Secrets never reach a file or the tracking server: what is redacted and how.

Redacted wherever the project writes a config or a spec (`config.yaml`, MLflow params and run
names, DeepSpeed spec files, result files):
- values under a key that names a secret (token, secret, password, api key, credential,
  authorization; e.g. `engine.vllm.launch.env.HF_TOKEN`), whatever the value;
- credentials inside URLs (`https://user:PASSWORD@host` -> `https://user:***@host`) and secret
  query parameters (`?api_key=...`), in any string.
Other values stay readable (`engine.vllm.launch.env.CUDA_VISIBLE_DEVICES: "1"` is useful in
the MLflow UI). A redacted config is still comparable: a run resumes when only a secret changed.
"""
from __future__ import annotations

import re
from typing import Any

MASK = "***"
SECRET_NAME = re.compile(r"(?:^|[\W_])(?:token|secret|password|passwd|pwd|api[_-]?key|apikey|credentials?"
                         r"|authori[sz]ation|private[_-]?key|access[_-]?key)(?:$|[\W_])", re.I)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:@/\s]*):(?P<pw>[^@/\s]+)@",
                           re.I)
_QUERY_SECRET = re.compile(r"(?P<key>[?&;](?:[\w.-]*(?:token|secret|passw|api[_-]?key|apikey|"
                           r"key|sig|signature|credential)[\w.-]*)=)(?P<value>[^&;#\s]+)", re.I)
_BEARER = re.compile(r"(?P<key>\bBearer\s+)(?P<value>[\w.~+/=-]+)", re.I)


def is_secret_name(name: str) -> bool:
    """`HF_TOKEN`, `OPENAI_API_KEY`, `password` yes; `max_new_tokens` no; a name ending in `_env`
    names an environment variable, not its value (`api_key_env: VLLM_API_KEY` stays)."""
    name = str(name)
    return bool(SECRET_NAME.search(name)) and not name.lower().endswith("_env")


def redact_text(text: str) -> str:
    """`text` with URL passwords, secret query parameters and bearer tokens masked."""
    if not isinstance(text, str) or not text:
        return text
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m['key']}{MASK}", text)
    return _BEARER.sub(lambda m: f"{m['key']}{MASK}", text)


def redact(value: Any, name: str = "") -> Any:
    """A copy of a JSON-like value with every secret masked (see the module docstring)."""
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, name) for v in value)
    if name and is_secret_name(name) and value not in (None, "", {}, []):
        return MASK
    return redact_text(value) if isinstance(value, str) else value
