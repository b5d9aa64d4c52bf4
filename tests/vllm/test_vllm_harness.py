"""lm-evaluation-harness against a real vLLM server (the CPU build, in its own environment):
our tasks go through lm-eval's chat-completions client offline (no tokenizer download), with
the server's model name found at /v1/models when not given."""
from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")

from eval.harness import run_harness  # noqa: E402

pytestmark = pytest.mark.vllm



@pytest.mark.benchmarks("gsm8k")
def test_harness_runs_against_the_server(server):
    out = run_harness(["gsm8k"], base_url=server.url, limit=2, max_new_tokens=48, batch_size=2)
    row = out["benchmarks"]["gsm8k"]
    assert row["n"] == 2 and 0.0 <= row["accuracy"] <= 1.0 and row["stderr"] >= 0.0
    config = out["config"]
    assert config["model"] == "local-chat-completions"
    assert config["served_model"] == "policy"  # read from the server's /v1/models
    assert config["base_url"] == server.url + "/v1/chat/completions"


@pytest.mark.benchmarks("aqua")
def test_harness_with_a_named_model_and_v1_url(server):
    out = run_harness(["aqua"], base_url=server.url + "/v1", served_model="policy", limit=2,
                      max_new_tokens=16, batch_size=1)
    assert out["benchmarks"]["aqua"]["n"] == 2
