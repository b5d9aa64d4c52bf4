"""What every config section shares: the error type and the strict, frozen base model."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(Exception):
    """A config problem, with a one-line message naming the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
