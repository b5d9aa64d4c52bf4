"""The reasoning-benchmark systems against a real vLLM server (the CPU build, in its own
environment): `OpenAIChatEngine` gets a reply per conversation with the server's token counts,
single/MAD/AutoGen run whole questions through it, and `mars eval mas --model http://...`
evaluates an endpoint end to end."""
from __future__ import annotations

import json

import pytest

from cli.main import main
from eval.benchmarks import load
from eval.systems import run_system
from mars_core.engines.chat import ChatParams, OpenAIChatEngine

pytestmark = pytest.mark.vllm

MAX_MODEL_LEN = 2048



@pytest.fixture(scope="module")
def chat(server):
    return OpenAIChatEngine(server.url, max_concurrency=8)


def test_chat_gives_a_reply_per_conversation_with_usage(chat, tokenizer):
    assert chat.model == "policy"  # the server's first (only) model
    convs = [[{"role": "system", "content": "You are a helpful assistant."},
              {"role": "user", "content": text}]
             for text in ("What is 2 + 3?", "Name a fruit.", "Say hello.", "Count to five.")]
    params = ChatParams(max_new_tokens=24, seed=1)
    replies = chat.chat(convs, params)
    assert len(replies) == 4
    for conv, reply in zip(convs, replies):
        assert reply.error == "" and reply.text
        assert 0 < reply.completion_tokens <= params.max_new_tokens
        assert reply.finish_reason in ("stop", "length")
        # the server renders the same chat template the in-process engine uses
        ids = tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=True)
        if not isinstance(ids, list):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
        assert reply.prompt_tokens == len(ids)


def test_max_tokens_past_the_servers_context_still_gets_a_reply(chat):
    """vLLM answers HTTP 400 to any max_new_tokens above its max_model_len: the engine caps it at
    the context the model card lists, so the protocol's 8192 works on a 2048-token server."""
    assert chat.max_model_len == MAX_MODEL_LEN
    conv = [{"role": "user", "content": "Say hello in one word."}]
    [reply] = chat.chat([conv], ChatParams(max_new_tokens=8192, seed=2))
    assert reply.error == "" and reply.text
    assert reply.prompt_tokens + reply.completion_tokens <= MAX_MODEL_LEN


@pytest.mark.parametrize("system, least_calls", [("single", 1), ("mad", 3), ("autogen", 1)])
@pytest.mark.benchmarks("gsm8k")
def test_systems_answer_gsm8k_questions_through_the_server(chat, system, least_calls):
    questions = load("gsm8k", limit=2)
    results = run_system(system, questions, chat, ChatParams(max_new_tokens=32))
    assert [r.id for r in results] == [q.id for q in questions]
    for r in results:
        assert r.errors == [] and r.stop not in ("", "error")
        assert r.calls >= least_calls and len(r.transcript) == r.calls
        assert r.prompt_tokens > 0 and 0 < r.completion_tokens <= 32 * r.calls
    if system == "single":
        assert all(r.calls == 1 and r.stop == "answered" for r in results)


@pytest.mark.benchmarks("gsm8k")
def test_cli_evaluates_an_endpoint(server, prefect_api, tmp_path):
    out = tmp_path / "x.json"
    rc = main(["eval", "mas", "--model", server.url, "--systems", "single", "--benchmarks",
               "gsm8k", "--limit", "2", "--max-tokens", "32", "--out", str(out)])
    assert rc == 0
    body = json.loads(out.read_text())
    assert body["config"]["model"] == server.url and body["config"]["max_new_tokens"] == 32
    model = body["models"]["model"]
    assert model["engine"] == "openai:policy"
    [row] = model["rows"]
    assert (row["system"], row["benchmark"], row["n"], row["errors"]) == ("single", "gsm8k", 2, 0)
    assert row["calls"] == 2 and row["prompt_tokens"] > 0 and row["completion_tokens"] > 0
    records = tmp_path / "x_transcripts" / "model" / "single" / "gsm8k.jsonl"
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(lines) == 2 and all(rec["transcript"] for rec in lines)
