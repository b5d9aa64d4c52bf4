"""Test-wide set-up: offline, quiet, a temporary PREFECT_HOME, one Prefect test harness."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import mars_core.run.threads  # noqa: F401  (OpenMP's wait policy, the Prefect start timeout)

for _k, _v in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
               "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ[_k] = _v
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="mars-prefect-home-")
atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], True)  # one per process, not kept
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
# Seconds each scope took in a `make test` run (`make test-durations` rewrites it): the workers
# take the long scopes first, so the short ones fill the end and neither worker waits alone.
DURATIONS = REPO / "tests" / "durations.json"


def xdist_scope(nodeid: str) -> str:
    """The unit of work a pytest-xdist worker takes whole: a test file (its module fixtures
    are built once), or the fault-injection or cluster suite as a whole."""
    parts = Path(nodeid.split("::", 1)[0]).parts
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in WHOLE_SUITES:
        return parts[1]
    return "/".join(parts)


def recorded_durations(path: Path = DURATIONS) -> dict[str, float]:
    """scope -> seconds from `path`; {} where it is missing or not such a mapping (the order
    then falls back to the tests' count)."""
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: float(v) for k, v in data.items()
            if isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)}


def longest_first(scopes: dict[str, int], seconds: dict[str, float]) -> list[str]:
    """`scopes` (scope -> number of tests) in the order the workers take them: by recorded
    seconds, longest first (the longest-processing-time rule); a scope with no record (a new
    file) is given its tests' count times the recorded mean seconds per test. Ties keep the
    collection order."""
    known = [s for s in scopes if s in seconds]
    per_test = (sum(seconds[s] for s in known) / max(1, sum(scopes[s] for s in known))
                if known else 1.0)
    estimate = {s: seconds[s] if s in seconds else scopes[s] * per_test for s in scopes}
    return sorted(scopes, key=lambda s: -estimate[s])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test`'s two workers (`-n 2 --dist loadgroup`) take whole `xdist_scope`s, the
    longest first by `tests/durations.json` (`longest_first`).
    Not xdist's own loadgroup: it groups by a suffix it writes into `item._nodeid`, which
    pytest 9.2 no longer reads, so every test went its own way and a module's fixtures (the
    production path's smoke run: 4.5 min) were built on both workers."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling

    class WholeScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "ordered", False):  # the first assignment: the queue is full
                self.ordered = True
                units = {scope: len(unit) for scope, unit in self.workqueue.items()}
                self.workqueue = OrderedDict(
                    (scope, self.workqueue[scope])
                    for scope in longest_first(units, recorded_durations()))
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False  # the order is ours
    return WholeScopes(config, log)


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each xdist scope's seconds (set-up, call and tear-down of its "
                          "tests) to PATH as JSON, as tests/durations.json holds them")


def pytest_report_header(config):
    """The free space where the suite writes (model copies of 0.5 GB each: a full disk fails
    a run's stages with "no space left", far from the cause)."""
    where = Path(tempfile.gettempdir())
    free = shutil.disk_usage(where).free / 2**30
    return f"temporary folder: {where}, {free:.1f} GiB free (a run of the suite held 5.6 GB)"


_SCOPE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Sums each scope's seconds (on the controller: the workers' reports come back to it)."""
    scope = xdist_scope(report.nodeid)
    _SCOPE_SECONDS[scope] = _SCOPE_SECONDS.get(scope, 0.0) + report.duration


def pytest_sessionfinish(session):
    path = session.config.getoption("--record-durations")
    if path and not hasattr(session.config, "workerinput") and _SCOPE_SECONDS:
        import json

        ordered = sorted(_SCOPE_SECONDS.items(), key=lambda kv: (-kv[1], kv[0]))
        Path(path).write_text(json.dumps({k: round(v, 1) for k, v in ordered}, indent=0) + "\n")


# `make test-full` (MARS_TEST_FULL=1): the tests marked `full` too, the heavier variants of what
# `make test` already covers (a second cluster configuration, every benchmark, ...)
FULL = os.environ.get("MARS_TEST_FULL") == "1"


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` run on a CUDA machine (`pytest -m gpu` there) and skip elsewhere.
    Tests marked `benchmarks(...)` read the benchmark files, which live outside the repository:
    without them they skip, the reason naming the files, the folder and where to get them
    (`tests/benchmark_files.py`). Tests marked `full` skip unless MARS_TEST_FULL=1 (`make
    test-full`), the reason naming what runs them."""
    import torch

    from tests.benchmark_files import missing_benchmarks

    if not FULL:
        heavy = pytest.mark.skip(reason="a heavier variant of what `make test` covers: "
                                        "`make test-full` runs it")
        for item in items:
            if "full" in item.keywords:
                item.add_marker(heavy)
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
