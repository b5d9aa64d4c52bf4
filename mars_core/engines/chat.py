"""Chat engines: what the reasoning-benchmark systems (debate, assistant/user proxy, single
agent) need from a model: a batch of conversations in, one reply each out.

Two implementations of one interface:
- `HFChatEngine`: the in-process transformers engine (`HFEngine`), conversations rendered with
  the model's chat template and sampled as one batch;
- `OpenAIChatEngine`: an OpenAI-compatible `/v1/chat/completions` endpoint (a vLLM server),
  one concurrent request per conversation.
Both send all four sampling values explicitly (temperature, top-p, top-k, max tokens), so a
server's or model folder's defaults never change the protocol. A failure of one conversation
(HTTP error, context overflow) is that reply's `error`, never an exception for the batch: the
systems count such a question as wrong.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import httpx

from mars_core.engines.base import prompt_seed
from mars_core.types import SamplingParams
from mars_core.vocab import FinishReason

Message = dict  # {"role": "system" | "user" | "assistant", "content": str}


@dataclass(frozen=True)
class ChatParams:
    """How a chat engine samples a reply. The defaults are the reasoning-benchmark sampling
    protocol (SPEC section 6), written only here: `BENCHMARK_SAMPLING`."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    max_new_tokens: int = 8192  # the token limit per reply (an OpenAI server's `max_tokens`)
    seed: int = 0
    # one seed per conversation of a call (the systems' per-question seeds: a question's
    # replies do not depend on which questions share the call, or the shard)
    seeds: tuple[int, ...] | None = None


BENCHMARK_SAMPLING = ChatParams()  # the protocol: the systems, the harness, the results' config


def benchmark_sampling(max_new_tokens: int | None = None) -> dict:
    """The protocol's sampling settings as the results files and MLflow params record them."""
    b = BENCHMARK_SAMPLING
    return {"max_new_tokens": b.max_new_tokens if max_new_tokens is None else max_new_tokens,
            "temperature": b.temperature, "top_p": b.top_p, "top_k": b.top_k}


@dataclass(frozen=True)
class ChatReply:
    """One assistant reply. `error` is "" on success, else one line saying what failed."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: FinishReason = FinishReason.STOP  # ERROR when the request failed
    error: str = ""

    def __post_init__(self):
        object.__setattr__(self, "finish_reason", FinishReason(self.finish_reason))


class ChatEngine(Protocol):
    def chat(self, conversations: list[list[Message]], params: ChatParams) -> list[ChatReply]:
        """One reply per conversation, in order; conversations are sampled concurrently."""
        ...


def is_endpoint(spec: str) -> bool:
    """A model spec naming an OpenAI-compatible server (a vLLM endpoint) rather than weights."""
    return spec.startswith(("http://", "https://"))


def _check(conversations: list[list[Message]]) -> None:
    for i, conv in enumerate(conversations):
        if not conv or any(not isinstance(m, dict) or "role" not in m or "content" not in m
                           for m in conv):
            raise ValueError(f"conversation {i} is empty or has a message without role/content")


class HFChatEngine:
    """Chat over the in-process `HFEngine` (batched, reproducible per `params.seed`)."""

    def __init__(self, engine):
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.name = "hf"

    def chat(self, conversations: list[list[Message]], params: ChatParams) -> list[ChatReply]:
        _check(conversations)
        if not conversations:
            return []
        prompts = [self._encode(conv) for conv in conversations]
        sampling = SamplingParams(temperature=params.temperature, top_p=params.top_p,
                                  top_k=params.top_k, max_new_tokens=params.max_new_tokens,
                                  seed=params.seed, seeds=params.seeds)
        try:
            done = self.engine.generate(prompts, sampling)
        except Exception as e:  # noqa: BLE001 - an engine failure fails these replies only
            line = f"{type(e).__name__}: {e}".splitlines()[0]
            return [ChatReply("", len(p), 0, FinishReason.ERROR, line) for p in prompts]
        replies = []
        for prompt, c in zip(prompts, done):
            error = "context overflow: the conversation fills the model's context" \
                if c.finish_reason == FinishReason.CONTEXT_OVERFLOW else ""
            text = self.tokenizer.decode(list(c.token_ids), skip_special_tokens=True) \
                if c.token_ids else ""
            replies.append(ChatReply(text.strip(), len(prompt), len(c.token_ids),
                                     c.finish_reason, error))
        return replies

    def _encode(self, conversation: list[Message]) -> list[int]:
        text = self.tokenizer.apply_chat_template(conversation, add_generation_prompt=True,
                                                  tokenize=False)
        return self.tokenizer.encode(text, add_special_tokens=False)


class OpenAIChatEngine:
    """Chat over an OpenAI-compatible server (`url` without `/v1`), one request per
    conversation, at most `max_concurrency` in flight. `model` defaults to the server's first
    model. Each request's seed is `prompt_seed(params, index)`.

    `max_model_len` is the context the server lists for the model (vLLM's model card; None
    when unknown): requests ask for at most that many tokens, because vLLM refuses every
    request whose max_tokens exceeds it (HTTP 400), while it shortens one that merely runs
    past the context with its prompt: a reply then stops at the context, as `HFChatEngine`'s
    does, instead of every call failing."""

    def __init__(self, url: str, model: str | None = None, *, api_key: str | None = None,
                 max_concurrency: int = 64, timeout_s: float = 1800):
        self.url = url.rstrip("/").removesuffix("/v1")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.max_concurrency = max(1, int(max_concurrency))
        self.timeout_s = timeout_s
        cards = self._model_cards(required=model is None)
        self.model = model or cards[0]["id"]
        card = next((c for c in cards if c.get("id") == self.model), {})
        self.max_model_len = int(card["max_model_len"]) if card.get("max_model_len") else None
        self.name = f"openai:{self.model}"

    def _model_cards(self, required: bool) -> list[dict]:
        """The server's model list (each a dict with "id"); [] if not `required` and absent."""
        try:
            r = httpx.get(self.url + "/v1/models", headers=self.headers, timeout=30)
            r.raise_for_status()
            cards = [c for c in r.json()["data"] if isinstance(c, dict) and "id" in c]
            if not cards:
                raise ValueError("it lists no model")
            return cards
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as e:
            if not required:
                return []
            raise ConnectionError(f"no model list at {self.url}/v1/models: {e!r}") from None

    def request(self, conversation: list[Message], params: ChatParams, index: int) -> dict:
        """The request body: all four sampling values explicit (top_k is a vLLM extension);
        max_new_tokens capped at the server's context (see the class docstring)."""
        max_tokens = min(params.max_new_tokens, self.max_model_len or params.max_new_tokens)
        return {"model": self.model, "messages": conversation,
                "temperature": params.temperature, "top_p": params.top_p,
                "top_k": params.top_k, "max_tokens": max_tokens,
                "seed": prompt_seed(params, index) % (1 << 31)}

    def chat(self, conversations: list[list[Message]], params: ChatParams) -> list[ChatReply]:
        _check(conversations)
        if not conversations:
            return []
        from mars_core.engines.vllm_client import _run_async

        return _run_async(self._all(conversations, params))

    async def _all(self, conversations, params) -> list[ChatReply]:
        limit = asyncio.Semaphore(self.max_concurrency)
        pool = httpx.Limits(max_connections=self.max_concurrency,
                            max_keepalive_connections=self.max_concurrency)
        async with httpx.AsyncClient(base_url=self.url, timeout=self.timeout_s, limits=pool,
                                     headers=self.headers) as client:
            async def one(i: int, conv: list[Message]) -> ChatReply:
                async with limit:
                    return await self._one(client, self.request(conv, params, i))

            return list(await asyncio.gather(*(one(i, c) for i, c in enumerate(conversations))))

    async def _one(self, client: httpx.AsyncClient, body: dict) -> ChatReply:
        try:
            r = await client.post("/v1/chat/completions", json=body)
        except httpx.HTTPError as e:
            return ChatReply("", 0, 0, FinishReason.ERROR, f"request to {self.url} failed: {e!r}")
        if r.status_code != 200:
            detail = r.text.strip().replace("\n", " ")[:200]
            return ChatReply("", 0, 0, FinishReason.ERROR, f"HTTP {r.status_code} from {self.url}: {detail}")
        try:
            payload = r.json()
            choice = payload["choices"][0]
            text = choice["message"].get("content") or ""
            usage = payload.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            return ChatReply("", 0, 0, FinishReason.ERROR, f"malformed reply from {self.url}: {e!r}")
        return ChatReply(text.strip(), int(usage.get("prompt_tokens") or 0),
                         int(usage.get("completion_tokens") or 0),
                         FinishReason.of(choice.get("finish_reason"), FinishReason.STOP))
