"""The vLLM engine's parts that need no vLLM: config checks, engine selection, the request
it sends, the reply it reads, its one-line errors, and the server-side re-tie of tied
embeddings. The engine against a real server: tests/vllm (`make test-vllm`)."""
from __future__ import annotations

import sys

import pytest
import torch

from mars_core.config import ConfigError, load_config
from mars_core.engines.base import request_seed
from mars_core.engines.vllm_server import (EXTENSION, EXTENSION_DIR, VLLMError, VLLMServer,
                                           completion_request, launch_command, parse_choice)
from mars_core.types import SamplingParams
from tests.conftest import REPO

SMOKE = str(REPO / "configs/smoke.yaml")


@pytest.mark.parametrize("override, words", [
    ("engine.backend=sglang", "engine.backend"),
    ("engine.vllm.url=localhost:8000", "http://"),
    ("engine.vllm.max_concurrency=0", "max_concurrency"),
    ("trainer.deepspeed.offload_params=true", "zero_stage: 3"),
])
def test_bad_engine_and_trainer_settings_are_named(override, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        load_config(SMOKE, [override])


def test_launch_command_asks_for_what_the_engine_relies_on():
    cmd = launch_command("/py", "/ckpt", port=8001, max_model_len=2048, dtype="bfloat16",
                         enforce_eager=True, extra_args=("--tensor-parallel-size", "2"))
    text = " ".join(cmd)
    assert cmd[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    for part in ("--logprobs-mode processed_logprobs", f"--worker-extension-cls {EXTENSION}",
                 "--served-model-name policy", "--max-model-len 2048", "--enforce-eager",
                 "--generation-config vllm", "--tensor-parallel-size 2", "--port 8001"):
        assert part in text


def test_request_body_maps_sampling_and_seeds_each_prompt():
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=0, min_p=0.05, max_new_tokens=64,
                            stop=("</answer>",), seed=3)
    body = completion_request([5, 6, 7], params, 4, "policy", max_positions=40)
    assert body["prompt"] == [5, 6, 7] and body["max_tokens"] == 37  # never past the context
    assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"]) == (0.7, 0.9, -1, 0.05)
    assert body["seed"] == request_seed(3, 4) != completion_request([5], params, 5, "p", 40)["seed"]
    assert body["logprobs"] == 0 and body["return_token_ids"] and body["include_stop_str_in_output"]
    greedy = completion_request([5], SamplingParams(temperature=0, top_k=50), 0, "p", 40)
    assert (greedy["temperature"], greedy["top_k"], greedy["top_p"]) == (0.0, -1, 1.0)


def test_reply_parsing_and_its_errors():
    ok = {"choices": [{"text": "<answer>3</answer>", "token_ids": [1, 2],
                       "logprobs": {"token_logprobs": [-0.5, -1.0]}, "finish_reason": "stop"}]}
    c = parse_choice(ok)
    assert (c.token_ids, c.logprobs, c.text, c.finish_reason) == ((1, 2), (-0.5, -1.0),
                                                                   "<answer>3</answer>", "stop")
    ok["choices"][0]["logprobs"]["token_logprobs"] = [-0.5]
    with pytest.raises(VLLMError, match="2 token ids but 1 log-probs"):
        parse_choice(ok)


def test_server_start_errors_are_one_line(tmp_path):
    with pytest.raises(VLLMError, match="no vLLM environment.*make vllm-env"):
        VLLMServer(launch_command(str(tmp_path / "nope"), "/m", port=1))
    # this environment has no vLLM: the process dies at once and the log's last line says why
    server = VLLMServer(launch_command(sys.executable, "/m", port=1),
                        log_path=tmp_path / "server.log", startup_timeout_s=60)
    with pytest.raises(VLLMError, match=r"exited with code \d+ while starting: .*vllm") as e:
        server.start()
    assert "\n" not in str(e.value)


def test_vllm_backend_without_a_server_is_a_clear_error(tmp_path, tiny_model_dir):
    from tasks.common import make_engine, shutdown_engines

    cfg = load_config(SMOKE, ["engine.backend=vllm", "engine.vllm.url=http://127.0.0.1:9"])
    with pytest.raises(VLLMError, match="cannot reach the vLLM server at http://127.0.0.1:9"):
        make_engine(cfg, str(tiny_model_dir))
    shutdown_engines()
    assert type(make_engine(load_config(SMOKE), str(tiny_model_dir))).__name__ == "HFEngine"


def _ext():
    sys.path.insert(0, str(EXTENSION_DIR))
    try:
        import mars_vllm_ext
    finally:
        sys.path.remove(str(EXTENSION_DIR))
    return mars_vllm_ext


class _Packed:
    """The CPU build's unquantised method: it derives a packed copy of the weight."""

    def process_weights_after_loading(self, layer):
        layer.packed = layer.weight.detach().clone()


def test_retie_points_the_output_head_at_the_reloaded_embedding():
    model = torch.nn.Module()
    model.model = torch.nn.Module()
    model.model.embed_tokens = torch.nn.Embedding(10, 4)
    model.lm_head = torch.nn.Linear(4, 10, bias=False)
    model.lm_head.quant_method = _Packed()
    model.lm_head.weight = model.model.embed_tokens.weight  # tied, as vLLM ties them
    model.lm_head.quant_method.process_weights_after_loading(model.lm_head)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(2)  # the in-place reload
    assert not torch.equal(model.lm_head.packed, model.model.embed_tokens.weight)  # stale
    assert _ext().retie_output_head(model)
    assert torch.equal(model.lm_head.packed, model.model.embed_tokens.weight)
    untied = torch.nn.Module()
    untied.lm_head = untied.embed_tokens = torch.nn.Embedding(3, 2)
    assert not _ext().retie_output_head(untied)  # one module: nothing to re-tie
