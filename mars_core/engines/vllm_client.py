"""The client of a vLLM server (`mars_core.engines.vllm_server`): `VLLMEngine` is the
`Engine` interface over HTTP, the same as the in-process sampler's, so the game loop does not
change:

- every prompt of a `generate` call is its own `/v1/completions` request, all in flight at
  once (up to `max_concurrency`), so vLLM's continuous batching, not our loop, decides how
  replies of very different lengths share the accelerator;
- each request asks for the sampled tokens' ids and log-probs (`return_token_ids`,
  `logprobs: 0`); the server runs with `--logprobs-mode processed_logprobs`, so a log-prob is
  taken under the tempered distribution, as the in-process engine's (which is over the full
  vocabulary: the two agree exactly without top-k/top-p truncation; with it, vLLM renormalises
  over the kept tokens). The trainer recomputes its own old log-probs either way;
- each request carries its own seed, `prompt_seed(params, index)`;
- `load_weights(path)` is the weight handshake after a training step: the server reloads the
  saved checkpoint in place without a restart (`/collective_rpc` -> our worker extension's
  `mars_reload_weights`, vLLM's `reload_weights` plus re-tying tied embeddings, see
  `vllm_ext/mars_vllm_ext.py`) and drops its prefix cache, whose KV entries belong to the old
  weights. Both endpoints exist when the server runs with `VLLM_SERVER_DEV_MODE=1`;
- a server we started on a network address (placed by Ray) speaks TLS with a certificate made
  for that start: the client trusts that certificate only (`server.verify`, pinned).
"""
from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx

from mars_core.engines.base import prompt_seed
from mars_core.engines.vllm_server import (EXTENSION, EXTENSION_DIR, VLLMError, VLLMServer,
                                           VLLMUnreachable)
from mars_core.types import Completion, SamplingParams
from mars_core.vocab import FinishReason


class VLLMEngine:
    """The `Engine` interface over a vLLM server (see the module docstring). Every request
    carries `api_key` (None: none) as a bearer token. With `server` (the process we started),
    a request that fails, or waits while that process is gone, fails at once with one line
    saying the server died, instead of waiting for `timeout_s`; its `verify` (the pinned
    certificate of a server on TLS) checks every connection."""

    def __init__(self, url: str, tokenizer, *, max_concurrency: int = 256,
                 timeout_s: float = 600, served: str | Path | None = None,
                 server: VLLMServer | None = None, api_key: str | None = None):
        self.url = url.rstrip("/")
        self.tokenizer = tokenizer
        self.max_concurrency = max(1, int(max_concurrency))
        self.timeout_s = timeout_s
        self.served = str(Path(served).resolve()) if served else None  # as far as we know
        self.server = server  # the process we started, if we did (`stop` ends it)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.verify = getattr(server, "verify", True)  # an ssl context pinning its certificate
        info = self._get("/v1/models")["data"][0]
        self.model_name = info["id"]
        self.max_positions = int(info.get("max_model_len") or (1 << 30))
        self.stats = {"calls": 0, "prompts": 0, "prompt_tokens": 0, "generated_tokens": 0,
                      "seconds": 0.0, "max_in_flight": 0, "reloads": 0,
                      "reload_seconds": 0.0}
        self.in_flight = 0  # requests sent and not answered

    def tokens_per_second(self) -> float:
        return self.stats["generated_tokens"] / max(self.stats["seconds"], 1e-9)

    # -- weights -------------------------------------------------------------------------
    def load_weights(self, path: str | Path) -> float:
        """Make the server serve the checkpoint at `path` (a folder of safetensors readable by
        the server): in-place reload, then a prefix-cache reset. Returns the seconds taken."""
        path = str(Path(path).resolve())
        if not any(Path(path).glob("*.safetensors")):  # the server reads the same filesystem
            raise VLLMError(f"no safetensors weights in {path}: nothing for the vLLM server to load")
        start = time.perf_counter()
        try:
            self._post("/collective_rpc", {"method": "mars_reload_weights",
                                           "kwargs": {"weights_path": path}}, what="reload weights")
        except VLLMError as e:
            if "mars_reload_weights" not in str(e):
                raise
            raise VLLMError(f"the vLLM server at {self.url} lacks our weight-sync extension: start "
                            f"it with PYTHONPATH={EXTENSION_DIR} and --worker-extension-cls "
                            f"{EXTENSION}") from None
        self._post("/reset_prefix_cache", None, what="reset the prefix cache")
        self.served = path
        seconds = time.perf_counter() - start
        self.stats["reloads"] += 1
        self.stats["reload_seconds"] += seconds
        return seconds

    def serve(self, path: str | Path) -> None:
        """Reload only when the server does not already hold `path`."""
        if self.served != str(Path(path).resolve()):
            self.load_weights(path)

    # -- sampling ------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt, in input order; each prompt is its own concurrent
        request. Prompts that leave no room for a new token get an empty completion with
        finish_reason "context_overflow" (no request)."""
        return generate_counted(self, prompts, params)

    def client(self) -> httpx.AsyncClient:
        """An HTTP client for this server's requests (up to `max_concurrency` connections)."""
        limits = httpx.Limits(max_connections=self.max_concurrency,
                              max_keepalive_connections=self.max_concurrency)
        return httpx.AsyncClient(base_url=self.url, timeout=self.timeout_s, limits=limits,
                                 headers=self.headers, verify=self.verify)

    async def complete(self, client: httpx.AsyncClient, i: int, prompt: list[int],
                       params: SamplingParams) -> Completion:
        """Prompt `i` of a call as one request (VLLMError when it fails)."""
        if len(prompt) >= self.max_positions:
            return Completion((), (), "", FinishReason.CONTEXT_OVERFLOW)
        self.in_flight += 1
        self.stats["max_in_flight"] = max(self.stats["max_in_flight"], self.in_flight)
        try:
            body = completion_request(prompt, params, i, self.model_name, self.max_positions)
            r = await _request(client.post("/v1/completions", json=body))
        finally:
            self.in_flight -= 1
        if isinstance(r, httpx.HTTPError):
            raise self._error(f"vLLM request to {self.url} failed", r, await self._gone_async(3))
        if r.status_code >= 500 and await self._dead(client):  # a dying server's last answers
            raise VLLMUnreachable(f"the vLLM server at {self.url} failed (HTTP {r.status_code}) "
                                  "and is no longer healthy")
        return parse_choice(_json(r, "generate"))

    async def _dead(self, client: httpx.AsyncClient) -> bool:
        """After a server error: whether the server itself is down (the process we started is
        gone, or /health fails), not only this request. vLLM answers the requests in flight
        with 500 when its engine core dies, before the HTTP server goes."""
        if self.server is not None and await self._gone_async(1) is not None:
            return True
        try:
            return (await client.get("/health", timeout=5)).status_code != 200
        except httpx.HTTPError:
            return True

    async def _generate_all(self, prompts, params) -> list[Completion]:
        limit = asyncio.Semaphore(self.max_concurrency)
        async with self.client() as client:
            async def one(i: int, prompt: list[int]) -> Completion:
                async with limit:
                    return await self.complete(client, i, prompt, params)

            work = asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
            if self.server is None:
                return list(await work)
            watch = asyncio.ensure_future(self._watch_server())
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():  # the server died under the requests
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
                watch.result()
            watch.cancel()
            return list(work.result())

    async def _watch_server(self) -> None:
        """Raise VLLMError once the server process we started is gone (checked every 0.5 s)."""
        while (gone := self.server.gone()) is None:
            await asyncio.sleep(0.5)
        raise self._error("", None, gone)

    # -- HTTP ----------------------------------------------------------------------------
    @staticmethod
    def _error(message: str, e: Exception | None, gone: str | None) -> VLLMError:
        """The error for a request that got no answer (`e`): the server's death when the
        process we started is gone (`gone`), else `message` and `e`."""
        if gone is not None:
            return VLLMUnreachable(gone + "; run the same command again to resume with a new server")
        return VLLMUnreachable(f"{message}: {e!r}")

    def _gone(self, wait_s: float) -> str | None:
        """`VLLMServer.gone` of the server we started, given `wait_s` to end (its keeper reaps
        the group first, so a dead server's process ends shortly after its socket); None for a
        server given by URL."""
        return self.server.gone(wait_s) if self.server is not None else None

    async def _gone_async(self, wait_s: float) -> str | None:
        """`_gone` without blocking the event loop."""
        if self.server is None:
            return None
        deadline = time.monotonic() + wait_s
        while (gone := self.server.gone()) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return gone

    def _get(self, route: str) -> dict:
        r = _call(httpx.get, self.url + route, headers=self.headers, verify=self.verify,
                  timeout=30)
        if isinstance(r, httpx.HTTPError):
            raise self._error(f"cannot reach the vLLM server at {self.url}", r, self._gone(3))
        return _json(r, route)

    def _post(self, route: str, body: dict | None, what: str) -> None:
        r = _call(httpx.post, self.url + route, json=body, headers=self.headers,
                  verify=self.verify, timeout=self.timeout_s)
        if isinstance(r, httpx.HTTPError):
            raise self._error(f"cannot {what} on the vLLM server at {self.url}", r, self._gone(3))
        if r.status_code == 404:
            raise VLLMError(f"the vLLM server at {self.url} has no {route}: start it with "
                            "VLLM_SERVER_DEV_MODE=1 so the pipeline can update its weights")
        _json(r, what)


def generate_counted(engine, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
    """`engine._generate_all` (one server, or a pool of them) on `prompts`, counted in its
    `stats`: calls, prompts, prompt and generated tokens, seconds."""
    started = time.perf_counter()
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty")
    out = _run_async(engine._generate_all(prompts, params))
    engine.stats["calls"] += 1
    engine.stats["prompts"] += len(prompts)
    engine.stats["prompt_tokens"] += sum(len(p) for p, c in zip(prompts, out)
                                         if c.finish_reason != FinishReason.CONTEXT_OVERFLOW)
    engine.stats["generated_tokens"] += sum(len(c.token_ids) for c in out)
    engine.stats["seconds"] += time.perf_counter() - started
    return out


def completion_request(prompt: list[int], params: SamplingParams, index: int, model: str,
                       max_positions: int) -> dict:
    """The `/v1/completions` body for prompt `index` of a call (the prompt as token ids).
    Temperature 0 is greedy; top_k 0 means no top-k (vLLM: -1); the stop string stays in the
    text (as in the in-process engine); the reply never runs past the context."""
    greedy = params.temperature <= 0
    return {
        "model": model, "prompt": list(prompt),
        "max_tokens": min(params.max_new_tokens, max_positions - len(prompt)),
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": 1.0 if greedy else params.top_p,
        "top_k": -1 if greedy or params.top_k <= 0 else params.top_k,
        "min_p": 0.0 if greedy else params.min_p,
        "stop": list(params.stop), "include_stop_str_in_output": True,
        "seed": prompt_seed(params, index), "logprobs": 0, "return_token_ids": True,
        "skip_special_tokens": False, "spaces_between_special_tokens": False,
    }


def parse_choice(payload: dict) -> Completion:
    """A `/v1/completions` response with one choice -> Completion (ids, log-probs, text)."""
    choice = payload["choices"][0]
    ids = tuple(int(t) for t in choice.get("token_ids") or ())
    logprobs = tuple(float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or ())
    if len(logprobs) != len(ids):
        raise VLLMError(f"vLLM returned {len(ids)} token ids but {len(logprobs)} log-probs")
    reason = FinishReason.of(choice.get("finish_reason"), FinishReason.LENGTH)
    return Completion(ids, logprobs, choice.get("text") or "", reason)


def _call(method, *args, **kwargs) -> httpx.Response | httpx.HTTPError:
    """A request's response, or its error returned (not raised), so that the error we raise
    for it does not carry the HTTP error as its context."""
    try:
        return method(*args, **kwargs)
    except httpx.HTTPError as e:
        return e


async def _request(pending) -> httpx.Response | httpx.HTTPError:
    """`_call` for an awaitable request."""
    try:
        return await pending
    except httpx.HTTPError as e:
        return e


def _json(response: httpx.Response, what: str) -> dict:
    if response.status_code == 401:
        raise VLLMError(f"vLLM {what} failed (401): the server at {response.request.url.host} "
                        "wants its API key; give it in the environment variable "
                        "engine.vllm.api_key_env names (default VLLM_API_KEY)")
    if response.status_code != 200:
        detail = response.text.strip().replace("\n", " ")[:300]
        raise VLLMError(f"vLLM {what} failed ({response.status_code}): {detail}")
    return response.json() if response.content else {}


def _run_async(coro):
    """Run a coroutine to completion from sync code, also when the calling thread already
    has a running event loop (Prefect's): in a private thread with its own loop."""
    result: dict = {}

    def target():
        try:
            result["value"] = asyncio.run(coro)
        except BaseException as e:  # re-raised in the caller's thread
            result["error"] = e

    t = threading.Thread(target=target, name="vllm-requests")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
