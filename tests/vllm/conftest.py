"""The vLLM integration tests (`make test-vllm`): they need the vLLM environment that
`make vllm-env` builds, named by MARS_VLLM_PYTHON; without it they skip."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

VLLM_PYTHON = os.environ.get("MARS_VLLM_PYTHON", "")


@pytest.fixture(scope="session")
def vllm_python() -> str:
    if not (VLLM_PYTHON and os.access(VLLM_PYTHON, os.X_OK)):
        pytest.skip("no vLLM environment (MARS_VLLM_PYTHON); run `make test-vllm`")
    return VLLM_PYTHON


@pytest.fixture(scope="session")
def served_model(tmp_path_factory, embedded_dir) -> Path:
    """A private copy of the embedded model: the folder the server starts with."""
    out = tmp_path_factory.mktemp("served") / "model"
    shutil.copytree(embedded_dir, out)
    return out
