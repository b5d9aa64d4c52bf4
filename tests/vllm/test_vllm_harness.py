"""lm-evaluation-harness against a real vLLM server (the CPU build, in its own environment):
our tasks go through lm-eval's chat-completions client offline (no tokenizer download), with
the server's model name found at /v1/models when not given."""
from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")

from eval.harness import run_harness  # noqa: E402
from mars_core.engines.vllm_server import VLLMServer, free_port, launch_command  # noqa: E402

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def server(vllm_python, served_model, tmp_path_factory):
    cmd = launch_command(vllm_python, str(served_model), port=free_port(), dtype="float32",
                         max_model_len=2048, gpu_memory_utilization=0.1)
    srv = VLLMServer(cmd, log_path=tmp_path_factory.mktemp("vllm") / "server.log")
    srv.start()
    yield srv
    srv.stop()


def test_harness_runs_against_the_server(server):
    out = run_harness(["gsm8k"], base_url=server.url, limit=2, max_tokens=48, batch_size=2)
    row = out["benchmarks"]["gsm8k"]
    assert row["n"] == 2 and 0.0 <= row["accuracy"] <= 1.0 and row["stderr"] >= 0.0
    config = out["config"]
    assert config["model"] == "local-chat-completions"
    assert config["served_model"] == "policy"  # read from the server's /v1/models
    assert config["base_url"] == server.url + "/v1/chat/completions"


def test_harness_with_a_named_model_and_v1_url(server):
    out = run_harness(["aqua"], base_url=server.url + "/v1", served_model="policy", limit=2,
                      max_tokens=16, batch_size=1)
    assert out["benchmarks"]["aqua"]["n"] == 2
