"""The chat engines the reasoning-benchmark systems talk to.

- `HFChatEngine` over the in-process `HFEngine` (a tiny random Llama): replies per
  conversation, token counts, seeds, context overflow as a reply error, input checks.
- `OpenAIChatEngine` against a small real HTTP server started here (stdlib `http.server` in a
  thread, 127.0.0.1, a free port) that speaks `/v1/models` and `/v1/chat/completions`: the
  request body, concurrency, and every failure kind becoming that conversation's error only.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mars_core.engines.base import request_seed
from mars_core.engines.chat import ChatParams, ChatReply, HFChatEngine, OpenAIChatEngine

SYSTEM = {"role": "system", "content": "You are a terse assistant."}


def _conv(text: str, system: bool = True) -> list[dict]:
    return ([SYSTEM] if system else []) + [{"role": "user", "content": text}]


# ---------------------------------------------------------------- HFChatEngine (in process)

@pytest.fixture(scope="module")
def hf_chat(tiny_model_dir):
    from mars_core.engines.hf import HFEngine
    from mars_core.models.weights import load_model, load_tokenizer

    engine = HFEngine(load_model(tiny_model_dir), load_tokenizer(tiny_model_dir), batch_size=4)
    return HFChatEngine(engine)


CONVS = [_conv("What is 2 + 2?"), _conv("Name a colour."),
         _conv("Spell the word cat backwards, then explain how you did it.")]


def test_hf_batch_gives_one_reply_per_conversation_with_token_counts(hf_chat):
    params = ChatParams(max_new_tokens=12, seed=3)
    replies = hf_chat.chat(CONVS, params)
    assert len(replies) == 3 and all(isinstance(r, ChatReply) for r in replies)
    tok = hf_chat.tokenizer
    for conv, reply in zip(CONVS, replies):
        # the prompt is the chat template with the generation prompt, tokenized directly
        expected = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=True)
        if not isinstance(expected, list):  # newer transformers return a BatchEncoding
            expected = expected["input_ids"]
        assert reply.prompt_tokens == len(expected)
        assert 0 < reply.completion_tokens <= params.max_new_tokens
        assert reply.error == "" and reply.finish_reason in ("stop", "length")
        assert reply.text == reply.text.strip()
    # the system message is rendered into the prompt: a longer one lengthens the encoding
    longer = [{"role": "system", "content": SYSTEM["content"] + " Answer in one word."},
              CONVS[0][1]]
    assert hf_chat.chat([longer], params)[0].prompt_tokens > replies[0].prompt_tokens


def test_hf_same_seed_same_replies_and_order_is_kept(hf_chat):
    params = ChatParams(max_new_tokens=6, seed=7)
    first = hf_chat.chat(CONVS, params)
    again = hf_chat.chat(CONVS, params)
    assert first == again
    other = hf_chat.chat(CONVS, ChatParams(max_new_tokens=6, seed=8))
    assert [r.text for r in other] != [r.text for r in first]  # the seed is used
    # a reply depends on its conversation, the seed and its index, not on the rest of the batch
    assert hf_chat.chat(CONVS[:1], params)[0] == first[0]


def test_hf_conversation_longer_than_the_context_is_a_reply_error(hf_chat):
    limit = hf_chat.engine.max_positions
    long = _conv("word " * (limit + 200))
    replies = hf_chat.chat([CONVS[0], long, CONVS[1]], ChatParams(max_new_tokens=8, seed=1))
    overflow = replies[1]
    assert overflow.error and "context" in overflow.error and "\n" not in overflow.error
    assert overflow.text == "" and overflow.completion_tokens == 0
    assert overflow.prompt_tokens > limit
    assert replies[0].error == replies[2].error == ""  # the others are answered normally
    assert replies[0].completion_tokens > 0 and replies[2].completion_tokens > 0


@pytest.mark.parametrize("bad", [
    [[]],  # an empty conversation
    [[{"content": "no role"}]],  # a message without role
    [_conv("fine"), [{"role": "user"}]],  # a message without content, second conversation
    [["just a string"]],  # a message that is no dict
])
def test_hf_bad_conversations_are_value_errors(hf_chat, bad):
    with pytest.raises(ValueError, match="conversation"):
        hf_chat.chat(bad, ChatParams(max_new_tokens=4))


def test_hf_no_conversations_no_replies(hf_chat):
    assert hf_chat.chat([], ChatParams(max_new_tokens=4)) == []


# ---------------------------------------------------------------- OpenAIChatEngine (HTTP)

class FakeServer:
    """An OpenAI-compatible chat server in a thread. What it does with a request is read from
    the last message's content: "http500", "badjson", "nochoices" and "drop" (close the
    connection without replying) fail; anything else is answered "echo: <content>" after
    `delay_s`. `models`: list two models (True), answer 404 (False) or list none ("empty").
    It records every request body and the most requests in flight at once."""

    def __init__(self, models: bool | str = True, delay_s: float = 0.0):
        self.models, self.delay_s = models, delay_s
        self.bodies: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: bytes, kind: str = "application/json"):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/v1/models" and server.models == "empty":
                    self._send(200, b'{"object": "list", "data": []}')
                elif self.path == "/v1/models" and server.models:
                    self._send(200, json.dumps({"object": "list", "data": [
                        {"id": "served-model", "object": "model", "max_model_len": 100},
                        {"id": "second-model", "object": "model"}]}).encode())
                else:
                    self._send(404, b'{"detail": "Not Found"}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    time.sleep(server.delay_s)
                    self._reply(body)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _reply(self, body: dict):
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"detail": "Not Found"}')
                content = body["messages"][-1]["content"]
                if content == "http500":
                    return self._send(500, b"Internal Server Error\nTraceback: boom",
                                      "text/plain")
                if content == "badjson":
                    return self._send(200, b'{"choices": [{"message": ')
                if content == "nochoices":
                    return self._send(200, b'{"object": "chat.completion"}')
                if content == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return None
                reply = {"object": "chat.completion", "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "length",
                                      "message": {"role": "assistant",
                                                  "content": f"  echo: {content}\n"}}],
                         "usage": {"prompt_tokens": 10 + len(body["messages"]),
                                   "completion_tokens": 3, "total_tokens": 13}}
                return self._send(200, json.dumps(reply).encode())

        return Handler


def test_openai_request_carries_every_sampling_value_and_the_model():
    params = ChatParams(temperature=0.6, top_p=0.95, top_k=20, max_new_tokens=33, seed=5)
    with FakeServer() as srv:
        engine = OpenAIChatEngine(srv.url)
        assert engine.model == "served-model" and engine.name == "openai:served-model"
        replies = engine.chat([_conv("a"), _conv("b", system=False), _conv("c")], params)
    assert [r.text for r in replies] == ["echo: a", "echo: b", "echo: c"]  # order, stripped
    assert [r.prompt_tokens for r in replies] == [12, 11, 12]  # the server's usage counts
    assert all(r.completion_tokens == 3 and r.finish_reason == "length" and not r.error
               for r in replies)
    assert len(srv.bodies) == 3
    by_text = {b["messages"][-1]["content"]: b for b in srv.bodies}
    for i, text in enumerate("abc"):
        body = by_text[text]
        assert body["model"] == "served-model"
        assert (body["temperature"], body["top_p"], body["top_k"], body["max_tokens"]) == \
            (0.6, 0.95, 20, 33)
        assert body["seed"] == request_seed(5, i) % (1 << 31)  # per conversation, fits int32
    assert by_text["a"]["messages"][0] == SYSTEM  # the conversation goes out as given


def test_openai_named_model_and_v1_url_forms():
    with FakeServer() as srv:
        named = OpenAIChatEngine(srv.url + "/v1/", model="second-model")
        assert named.model == "second-model" and named.url == srv.url
        assert named.chat([_conv("x")], ChatParams(max_new_tokens=4))[0].text == "echo: x"
        assert OpenAIChatEngine(srv.url + "/v1").model == "served-model"
    assert srv.bodies[0]["model"] == "second-model"
    with FakeServer(models=False) as srv:  # a named model needs no model list
        named = OpenAIChatEngine(srv.url, model="m")
        assert named.max_model_len is None
        assert named.chat([_conv("y")], ChatParams(max_new_tokens=4))[0].text == "echo: y"


def test_openai_max_tokens_is_capped_at_the_listed_context():
    """vLLM refuses (HTTP 400) any request whose max_tokens exceeds the model's context, so
    the engine never asks for more than the model card's max_model_len."""
    with FakeServer() as srv:
        capped = OpenAIChatEngine(srv.url)  # served-model lists max_model_len 100
        assert capped.max_model_len == 100
        capped.chat([_conv("a")], ChatParams(max_new_tokens=8192))
        capped.chat([_conv("b")], ChatParams(max_new_tokens=60))
        free = OpenAIChatEngine(srv.url, model="second-model")  # lists no context
        assert free.max_model_len is None
        free.chat([_conv("c")], ChatParams(max_new_tokens=8192))
    assert [b["max_tokens"] for b in srv.bodies] == [100, 60, 8192]


def test_openai_conversations_go_out_concurrently_within_the_limit():
    convs = [_conv(f"q{i}") for i in range(6)]
    with FakeServer(delay_s=0.3) as srv:
        replies = OpenAIChatEngine(srv.url).chat(convs, ChatParams(max_new_tokens=4))
        assert [r.text for r in replies] == [f"echo: q{i}" for i in range(6)]
        assert srv.max_in_flight > 1
    with FakeServer(delay_s=0.05) as srv:
        OpenAIChatEngine(srv.url, max_concurrency=2).chat(convs, ChatParams(max_new_tokens=4))
        assert srv.max_in_flight <= 2 and len(srv.bodies) == 6


def test_openai_each_failure_is_that_conversations_error_only():
    kinds = ["http500", "badjson", "nochoices", "drop"]
    convs = [_conv("ok0")] + [_conv(k) for k in kinds] + [_conv("ok1")]
    with FakeServer() as srv:
        replies = OpenAIChatEngine(srv.url).chat(convs, ChatParams(max_new_tokens=4))
    assert len(replies) == len(convs)
    assert (replies[0].text, replies[-1].text) == ("echo: ok0", "echo: ok1")
    assert replies[0].error == replies[-1].error == ""
    failed = dict(zip(kinds, replies[1:-1]))
    for kind, reply in failed.items():
        assert reply.error and "\n" not in reply.error, kind
        assert reply.text == "" and reply.finish_reason == "error", kind
        assert srv.url in reply.error, kind
    assert "HTTP 500" in failed["http500"].error and "boom" in failed["http500"].error
    assert "malformed" in failed["badjson"].error and "malformed" in failed["nochoices"].error
    assert "failed" in failed["drop"].error


def test_openai_server_without_a_model_list_is_a_one_line_connection_error():
    with FakeServer(models=False) as srv:
        with pytest.raises(ConnectionError, match="no model list at .*/v1/models") as e:
            OpenAIChatEngine(srv.url)
    assert "\n" not in str(e.value)
    with FakeServer(models="empty") as srv:
        with pytest.raises(ConnectionError, match="no model list.*lists no model"):
            OpenAIChatEngine(srv.url)
    with pytest.raises(ConnectionError, match="no model list"):
        OpenAIChatEngine(_closed_port_url(), max_concurrency=1)


def test_openai_bad_conversations_are_value_errors_before_any_request():
    with FakeServer() as srv:
        engine = OpenAIChatEngine(srv.url)
        for bad in ([[]], [_conv("fine"), [{"content": "no role"}]]):
            with pytest.raises(ValueError, match="conversation"):
                engine.chat(bad, ChatParams(max_new_tokens=4))
        assert engine.chat([], ChatParams()) == []
    assert srv.bodies == []


def _closed_port_url() -> str:
    """A URL on a local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_the_one_builder_picks_the_engine_for_a_spec(tiny_model_dir):
    """`build_engine`: an endpoint URL (with `#NAME`) is the OpenAI client, a folder the
    in-process engine (behind its chat template with `chat=True`); `vllm` asks the caller's
    client, made to serve the weights."""
    from mars_core.engines.build import build_engine
    from mars_core.engines.hf import HFEngine

    with FakeServer() as srv:
        engine = build_engine(srv.url + "#second-model", batch_size=2, bf16=False, chat=True)
        assert isinstance(engine, OpenAIChatEngine) and engine.model == "second-model"
        assert engine.max_concurrency == 16
    chat = build_engine(str(tiny_model_dir), batch_size=3, bf16=False, chat=True)
    assert isinstance(chat, HFChatEngine) and chat.engine.batch_size == 3
    plain = build_engine(str(tiny_model_dir), batch_size=2, bf16=False, share_prefix=False)
    assert isinstance(plain, HFEngine) and not plain.share_prefix

    class Client:
        served = None

        def serve(self, path):
            self.served = path

    client = Client()
    assert build_engine("/w", backend="vllm", vllm=lambda p: client, batch_size=1,
                        bf16=False) is client and client.served == "/w"
