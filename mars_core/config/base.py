"""What every config section shares: the error type, the strict, frozen base model, and the
former names of renamed keys (accepted for one release, with a deprecation note)."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator


def _on_off(value: Any) -> Any:
    """YAML 1.1 reads `on`/`off` (unquoted, in a preset file) as booleans: back to the words."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


OnOffAuto = Annotated[Literal["auto", "on", "off"], BeforeValidator(_on_off)]


class ConfigError(Exception):
    """A config problem, with a one-line message naming the key."""


def deprecated(old: str, new: str, what: str = "config key") -> None:
    """The deprecation note for a former name still accepted: a FutureWarning (Python shows
    it by default), one line."""
    warnings.warn(f"{what} {old!r} is deprecated: it is now {new!r} (the old name is accepted "
                  "until the next release)", FutureWarning, stacklevel=4)


def former(old_value: Any, old: str, value: Any, new: str, what: str = "parameter") -> Any:
    """A flow parameter renamed: `old_value` (given under the former name `old`, None when
    not given) wins over `value`, with the deprecation note."""
    if old_value is None:
        return value
    deprecated(old, new, what)
    return old_value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # a key's former name -> its name now (read as the new key, with a deprecation note)
    RENAMED: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _former_names(cls, data: Any) -> Any:
        if not cls.RENAMED or not isinstance(data, dict):
            return data
        out = dict(data)
        for old, new in cls.RENAMED.items():
            if old in out:
                if new in out:
                    raise ValueError(f"{old!r} is the former name of {new!r}: give only {new!r}")
                deprecated(old, new)
                out[new] = out.pop(old)
        return out


def moved_preset(p: Path) -> Path:
    """A learning-lab experiment under its path before it moved from configs/learning/ to
    configs/lab/ (one recipe per game stayed): the new path, with a deprecation note."""
    lab = p.parent.parent / "lab" / p.name
    if not p.exists() and p.parent.name == "learning" and lab.is_file():
        deprecated(str(p), str(lab), "preset path")
        return lab
    return p
