"""Values that reach a flow without becoming Prefect parameters, and private files.

Prefect stores a flow run's parameters in its database and shows them in the UI and the API,
in clear. So the `mars` command never passes a secret as a parameter: `withheld(**params)`
gives the parameters with their secrets masked (`mars_core.privacy.redact`: `http://user:***@host`,
`engine.vllm.launch.env.HF_TOKEN=***`) plus `private`, the path of a file only this user can
read (mode 0600 in a 0700 temporary folder, removed when the flow returns) that holds the real
values of the masked ones; the flow's first line, `reveal(private, **params)`, puts them back.

A parameter given in clear (a deployment's, typed in the Prefect UI) is already stored: a
config override that holds a secret is then refused in one line (`SecretParameterError`),
pointing at the environment-variable settings (`engine.vllm.api_key_env`, `--api-key-env`)
and at `mars`, which hands secrets over this way.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from mars_core.privacy.redact import redact, redact_assignment

PRIVATE = "private"  # the flows' parameter naming the private file
OVERRIDE_PARAMS = ("overrides",)  # parameters that hold `key=value` config overrides


class SecretParameterError(ValueError):
    """A flow parameter that holds a secret in clear (one line)."""


def write_private(path: Path | str, text: str) -> Path:
    """`text` in `path`, readable by this user only (0600), written whole (one rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older file of that name kept its mode
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    tmp.replace(path)
    return path


def masked(name: str, value: Any) -> Any:
    """`value` as it may be shown: overrides one by one (`redact_assignment`), the rest
    through `redact` under the parameter's name."""
    if name in OVERRIDE_PARAMS and isinstance(value, (list, tuple)):
        return [redact_assignment(str(v)) for v in value]
    return redact(value, name)


@contextmanager
def withheld(**params: Any) -> Iterator[dict[str, Any]]:
    """`params` with every secret masked, plus `private`: the path of the private file holding
    the real values of the masked ones (None when nothing was masked). The file and its
    folder go when the block ends."""
    shown = {k: masked(k, v) for k, v in params.items()}
    secret = {k: v for k, v in params.items() if shown[k] != v}
    if not secret:
        yield shown | {PRIVATE: None}
        return
    folder = Path(tempfile.mkdtemp(prefix="mars-private-"))  # 0700
    try:
        path = write_private(folder / "parameters.json", json.dumps(secret))
        yield shown | {PRIVATE: str(path)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def reveal(private: str | None, **params: Any) -> dict[str, Any]:
    """The flow's real parameter values: `params` as given, those the `mars` command withheld
    read back from `private`. Overrides that hold a secret in clear are refused."""
    for name in OVERRIDE_PARAMS:
        for item in params.get(name) or ():
            if redact_assignment(str(item)) != item:
                key = str(item).partition("=")[0]
                raise SecretParameterError(
                    f"flow parameter {name!r}: {key!r} holds a secret, and Prefect keeps flow "
                    "parameters in clear; set it in the worker's environment instead (a server's "
                    "key: name its variable in engine.vllm.api_key_env), or run `mars`, which "
                    "hands secrets to the flow in a private file")
    if not private:
        return params
    try:
        secret = json.loads(Path(private).read_text())
    except (OSError, ValueError) as e:
        raise SecretParameterError(f"flow parameter {PRIVATE!r}: cannot read {private} "
                                   f"({type(e).__name__}); run the `mars` command again") from None
    return params | {k: v for k, v in secret.items() if k in params}
