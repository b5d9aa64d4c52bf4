"""Test-wide set-up: offline, quiet, a temporary PREFECT_HOME, one Prefect test harness."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import mars_core.run.threads  # noqa: F401  (OpenMP's wait policy, the Prefect start timeout)

for _k, _v in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
               "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ[_k] = _v
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="mars-prefect-home-")
# `model.bf16: auto` answers fp32 without measuring, on every CPU: bf16 play differs with its
# batch, and the suite compares sharded with one-process play token by token. The measurement
# itself is tested in tests/unit/test_precision.py (its cache in a temporary folder).
os.environ["MARS_BF16_AUTO"] = "off"
os.environ.pop("PREFECT_API_URL", None)
os.environ.pop("MLFLOW_TRACKING_URI", None)

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def embedded_dir(tmp_path_factory) -> Path:
    """The embedded model converted once per test session (in a temporary cache)."""
    from mars_core.models.weights import resolve_model

    return Path(resolve_model("embedded", cache_dir=tmp_path_factory.getbasetemp() / "mars-cache"))


@pytest.fixture(scope="session")
def tokenizer(embedded_dir):
    from mars_core.models.weights import load_tokenizer

    return load_tokenizer(embedded_dir)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, embedded_dir, tokenizer) -> Path:
    """A tiny randomly initialised Llama with the embedded tokenizer: fast, for flow tests."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                      tie_word_embeddings=True)
    out = tmp_path_factory.mktemp("tiny-model")
    LlamaForCausalLM(cfg).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def prefect_api():
    """One Prefect test server for the session; yields its API URL (for subprocesses too)."""
    import prefect.main  # noqa: F401  (sets up Prefect's log handlers now, on the session's
    # stderr: set up inside a test using capsys, they would keep writing to its closed stream)
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


WHOLE_SUITES = ("faults", "cluster")  # their session fixtures: the reference runs, a Ray cluster


def xdist_scope(nodeid: str) -> str:
    """The unit of work a pytest-xdist worker takes whole: a test file (its module fixtures
    are built once), or the fault-injection or cluster suite as a whole."""
    parts = Path(nodeid.split("::", 1)[0]).parts
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in WHOLE_SUITES:
        return parts[1]
    return "/".join(parts)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test`'s two workers (`-n 2 --dist loadgroup`) take whole `xdist_scope`s, in
    collection order (cluster, e2e, faults and flows, the long ones, before the unit tests).
    Not xdist's own loadgroup: it groups by a suffix it writes into `item._nodeid`, which
    pytest 9.2 no longer reads, so every test went its own way and a module's fixtures (the
    production path's smoke run: 4.5 min) were built on both workers."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WholeScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    config.option.loadscopereorder = False  # keep the collection order: the long scopes first
    return WholeScopes(config, log)


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` run on a CUDA machine (`pytest -m gpu` there) and skip elsewhere.
    Tests marked `benchmarks(...)` read the benchmark files, which live outside the repository:
    without them they skip, the reason naming the files, the folder and where to get them
    (`tests/benchmark_files.py`)."""
    import torch

    from tests.benchmark_files import missing_benchmarks

    reasons: dict[tuple[str, ...], str | None] = {}
    for item in items:
        for mark in item.iter_markers("benchmarks"):
            if mark.args not in reasons:
                reasons[mark.args] = missing_benchmarks(mark.args)
            if reasons[mark.args]:
                item.add_marker(pytest.mark.skip(reason=reasons[mark.args]))
                break
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
