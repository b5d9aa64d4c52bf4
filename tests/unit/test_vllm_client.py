"""The vLLM engine's parts that need no vLLM: config checks, engine selection, the request
it sends, the reply it reads, its one-line errors, the launched server's environment (KV
cache size, API key, dev mode), the key check on the server's routes, and the server-side
re-tie of tied embeddings. The engine against a real server: tests/vllm (`make test-vllm`)."""
from __future__ import annotations

import asyncio
import sys

import pytest
import torch

from mars_core.run import offline
from mars_core.config import ConfigError, load_config
from mars_core.config.engine import GiB
from mars_core.engines.base import request_seed
from mars_core.engines.vllm_client import completion_request, parse_choice
from mars_core.engines.vllm_server import (EXTENSION, EXTENSION_DIR, MIDDLEWARE, VLLMError,
                                           VLLMServer, cpu_kv_cache_gib, launch_command)
from mars_core.run.procgroup import free_port
from mars_core.types import SamplingParams
from tests.conftest import REPO

SMOKE = str(REPO / "configs/smoke.yaml")


@pytest.mark.parametrize("override, words", [
    ("engine.backend=sglang", "engine.backend"),
    ("engine.vllm.url=localhost:8000", "http://"),
    ("engine.vllm.urls=[http://a:1, b:2]", "urls\\[1\\] must start with http://"),
    ("engine.vllm.urls=[http://a:1, http://a:1]", "names a server twice"),
    ("engine.vllm.launch.replicas=0", "replicas"),
    ("engine.vllm.max_concurrency=0", "max_concurrency"),
    ("trainer.deepspeed.offload_params=true", "zero_stage: 3"),
    ("engine.vllm.launch.cpu_kv_cache_bytes=0", "cpu_kv_cache_bytes"),
    ("engine.vllm.api_key_env=sk-abc123/x", "not an environment variable name"),
    ("engine.vllm.launch.extra_args=[--api-key, k]", "--api-key is set by the pipeline"),
    ("engine.vllm.launch.extra_args=[--host=0.0.0.0]", "--host is set by the pipeline"),
])
def test_bad_engine_and_trainer_settings_are_named(override, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        load_config(SMOKE, [override])


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "\"::\"", "fe80::1", "gpu-node-7"])
def test_a_launched_server_listens_on_loopback_only(host):
    with pytest.raises(ConfigError) as e:
        load_config(SMOKE, [f"engine.vllm.launch.host={host}"])
    message = str(e.value)
    assert "\n" not in message and "engine.vllm.launch.host" in message
    assert "not a loopback address" in message and "set engine.vllm.url" in message
    for ok in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert load_config(SMOKE, [f"engine.vllm.launch.host={ok}"]).engine.vllm.launch.host == ok


def test_cpu_kv_cache_goes_to_vllm_in_whole_gib_rounded_up():
    sizes = (1, GiB, GiB + 1, 3 * GiB // 2, 4 * GiB)
    assert [cpu_kv_cache_gib(n) for n in sizes] == [1, 1, 2, 2, 4]
    with pytest.raises(ValueError, match="positive"):
        cpu_kv_cache_gib(0)
    assert load_config(SMOKE).engine.vllm.launch.cpu_kv_cache_bytes == GiB


def test_launched_server_environment(tmp_path):
    """The key and the KV cache size in the server's environment, never on its command line;
    dev mode on loopback, or behind TLS and the key; without them a network address is
    refused, whatever the caller's environment or `env` say."""
    cmd = launch_command(sys.executable, "/m", port=1)
    assert "--api-key" not in cmd and cmd[cmd.index("--middleware") + 1] == MIDDLEWARE
    server = VLLMServer(cmd, api_key="s3cret", cpu_kv_cache_bytes=3 * GiB // 2,
                        env={"VLLM_SERVER_DEV_MODE": "1", "VLLM_API_KEY": "theirs"},
                        log_path=tmp_path / "vllm_server.log")
    assert server.env["VLLM_API_KEY"] == "s3cret" and "s3cret" not in " ".join(server.command)
    assert server.env["VLLM_CPU_KVCACHE_SPACE"] == "2" and server.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert all(server.env[k] == v for k, v in offline.ENV.items())  # hub offline, quiet
    assert server.headers == {"Authorization": "Bearer s3cret"}
    assert server.pid_file == tmp_path / "vllm_server.pid"
    bare = VLLMServer(launch_command(sys.executable, "/m", port=1), env={"VLLM_API_KEY": "x"})
    assert "VLLM_API_KEY" not in bare.env and bare.headers == {}  # no key: none inherited
    v6 = VLLMServer(launch_command(sys.executable, "/m", port=free_port("::1"), host="::1"))
    assert v6.url.startswith("http://[::1]:") and v6.dev_mode


def test_a_server_on_a_network_address_needs_tls_and_its_key(tmp_path, monkeypatch):
    """Off loopback (a replica Ray placed on its node's address) the server speaks TLS with a
    certificate made for that start, wants its key, and then has its dev-mode (weight-reload)
    routes; without either it is refused. The client trusts that certificate only, and the
    private key goes with the server."""
    import ssl

    from mars_core.engines.vllm_tls import self_signed

    monkeypatch.setenv("VLLM_API_KEY", "inherited")
    for tls, key in ((None, None), (None, "k3y"), ("tls", None)):
        made = self_signed("10.1.2.3") if tls else None
        with pytest.raises(VLLMError, match="network address 10.1.2.3 needs TLS and an API key"):
            VLLMServer(launch_command(sys.executable, "/m", port=1, host="10.1.2.3", tls=made),
                       api_key=key)
        if made:
            made.remove()
    tls = self_signed("10.1.2.3")
    assert oct(tls.folder.stat().st_mode & 0o777) == "0o700"
    assert oct(tls.keyfile.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(VLLMError, match="certificate is not on its command line"):
        VLLMServer(launch_command(sys.executable, "/m", port=1, host="10.1.2.3"), api_key="k",
                   tls=tls)
    cmd = launch_command(sys.executable, "/m", port=8001, host="10.1.2.3", tls=tls)
    server = VLLMServer(cmd, api_key="k3y", env={"VLLM_SERVER_DEV_MODE": "0"}, tls=tls,
                        log_path=tmp_path / "vllm_server.log")
    assert cmd[cmd.index("--ssl-keyfile") + 1] == str(tls.keyfile)
    assert cmd[cmd.index("--ssl-certfile") + 1] == str(tls.certfile)
    assert server.url == "https://10.1.2.3:8001" and server.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert server.env["VLLM_API_KEY"] == "k3y" and server.cert_pem == tls.cert_pem
    assert isinstance(server.verify, ssl.SSLContext) and server.verify.check_hostname
    assert server.verify.cert_store_stats()["x509"] == 1  # that certificate, nothing else
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(tls.cert_pem.encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.1.2.3"]
    server.stop()
    assert not tls.folder.exists()  # the private key went with the server
    with pytest.raises(ConfigError, match="--ssl-keyfile is set by the pipeline"):
        load_config(SMOKE, ["engine.vllm.launch.extra_args=[--ssl-keyfile, /k.pem]"])


HTTPS_SERVER = """
import http.server, ssl, sys
arg = lambda flag: sys.argv[sys.argv.index(flag) + 1]
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
httpd = http.server.HTTPServer((arg("--host"), int(arg("--port"))), Health)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(arg("--ssl-certfile"), arg("--ssl-keyfile"))
httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
httpd.serve_forever()
"""


def test_a_tls_server_is_reached_through_its_pinned_certificate_only(tmp_path):
    """A real process serving HTTPS with one start's certificate, started as the server: it
    comes up over TLS, its private key is off the disk once it answers, the client pinning
    that certificate gets through; one pinning another start's certificate (same address)
    and one with the system CAs do not."""
    import httpx

    from mars_core.engines.vllm_tls import pinned_context, self_signed

    tls, other = self_signed("127.0.0.1"), self_signed("127.0.0.1")
    port = free_port()
    server = VLLMServer([sys.executable, "-c", HTTPS_SERVER, "--host", "127.0.0.1", "--port",
                         str(port), "--ssl-keyfile", str(tls.keyfile), "--ssl-certfile",
                         str(tls.certfile)], api_key="k3y", tls=tls,
                        log_path=tmp_path / "vllm_server.log", startup_timeout_s=60)
    try:
        assert server.start() == f"https://127.0.0.1:{port}"
        assert not tls.folder.exists()  # loaded by the server, gone from the disk
        health = httpx.get(server.url + "/health", verify=server.verify, timeout=10)
        assert health.status_code == 200
        for verify in (pinned_context(other.cert_pem), True):
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                httpx.get(server.url + "/health", verify=verify, timeout=10)
    finally:
        server.stop()
        other.remove()


def test_the_key_reaches_the_server_process_but_not_its_command_line(tmp_path):
    """A real process started as the server: the key is in its environment
    (/proc/<pid>/environ), not in any group member's command line, not in the pid file."""
    script = ("import os, sys, time; print('key' if os.environ.get('VLLM_API_KEY') == "
              "'s3cret-k3y' else 'no key', flush=True); time.sleep(60)")
    server = VLLMServer([sys.executable, "-c", script, "--host", "127.0.0.1", "--port", "1"],
                        api_key="s3cret-k3y", log_path=tmp_path / "vllm_server.log",
                        startup_timeout_s=3)
    with pytest.raises(VLLMError, match="did not answer within 3 s"):
        server.start()  # it serves nothing: stopped after the timeout
    assert server.log_path.read_text().splitlines()[0] == "key"
    for line in (tmp_path / "vllm_server.log").read_text().splitlines():
        assert "s3cret-k3y" not in line
    assert not server.pid_file.exists()


def _ask(middleware, path: str, headers: list[tuple[bytes, bytes]]) -> int:
    """The status `middleware` answers a GET of `path` with (200: passed to the app)."""
    sent = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": headers}
    asyncio.run(middleware(app)(scope, None, send))
    return sent[0]["status"]


def test_require_key_guards_every_route_but_health(monkeypatch):
    guard = _ext().RequireKey
    monkeypatch.setenv("VLLM_API_KEY", "k3y")
    ok = [(b"authorization", b"Bearer k3y")]
    for path in ("/collective_rpc", "/reset_prefix_cache", "/sleep", "/v1/completions",
                 "/tokenize"):
        assert _ask(guard, path, []) == 401
        assert _ask(guard, path, [(b"authorization", b"Bearer nope")]) == 401
        assert _ask(guard, path, [(b"authorization", b"Basic k3y")]) == 401
        assert _ask(guard, path, ok) == 200
    assert _ask(guard, "/health", []) == 200
    monkeypatch.delenv("VLLM_API_KEY")
    assert _ask(guard, "/collective_rpc", []) == 200  # a server without a key: open


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
    from tasks.engine_factory import make_engine
    from tasks.vllm_launch import shutdown_engines

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


class _Stub:
    """An HTTP server that answers like vLLM's OpenAI routes: /v1/models, /health and
    /v1/completions (one token, or `status` with vLLM's dead-engine message)."""

    def __init__(self, status: int = 200, healthy: bool = True):
        import http.server
        import json
        import threading

        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body: dict | None = None):
                data = json.dumps(body or {}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/health":
                    return self._send(200 if stub.healthy else 503)
                self._send(200, {"data": [{"id": "policy", "max_model_len": 512}]})

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                stub.requests += 1
                if stub.status != 200:
                    return self._send(stub.status, {"error": {"message": "EngineCore "
                                                              "encountered an issue."}})
                self._send(200, {"choices": [{"token_ids": [7], "text": "x", "finish_reason":
                                              "stop", "logprobs": {"token_logprobs": [-0.1]}}]})

        self.status, self.healthy, self.requests = status, healthy, 0
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.mark.parametrize("healthy", [False, True])
def test_a_server_error_from_a_dying_server_goes_to_another(healthy):
    """vLLM answers the requests in flight with 500 when its engine core dies: the pool takes
    that server out and retries on the others; a 500 from a healthy server is an error."""
    from mars_core.engines.vllm_client import VLLMEngine
    from mars_core.engines.vllm_pool import VLLMPool
    from mars_core.engines.vllm_server import VLLMError
    from mars_core.types import SamplingParams

    sick, well = _Stub(status=500, healthy=healthy), _Stub()
    try:
        pool = VLLMPool([VLLMEngine(s.url, tokenizer=None) for s in (sick, well)])
        params = SamplingParams(temperature=1.0, max_new_tokens=4, seed=1)
        if healthy:
            with pytest.raises(VLLMError, match=r"failed \(500\).*EngineCore"):
                pool.generate([[1, 2], [3, 4]], params)
            assert pool.live == [0, 1]
            return
        out = pool.generate([[1, 2], [3, 4], [5, 6]], params)
        assert [c.token_ids for c in out] == [(7,)] * 3
        assert pool.live == [1] and pool.stats["left"] == 1 and sick.requests >= 1
    finally:
        sick.httpd.shutdown(), well.httpd.shutdown()


def test_a_cpu_server_prefills_whole_prompts():
    """vLLM's CPU build dies when a seeded request's prefill is split over two steps, and every
    request of ours is seeded: on a machine without CUDA the launched server prefills whole
    prompts, unless the preset says otherwise in extra_args."""
    import torch

    cmd = launch_command(sys.executable, "/m", port=1)
    assert ("--no-enable-chunked-prefill" in cmd) == (not torch.cuda.is_available())
    own = launch_command(sys.executable, "/m", port=1, extra_args=("--enable-chunked-prefill",))
    assert "--no-enable-chunked-prefill" not in own and own[-1] == "--enable-chunked-prefill"
