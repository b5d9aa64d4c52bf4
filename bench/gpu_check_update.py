"""bench/gpu_check.py's PPO update (steps 3 and 7, issue 47): the steps' context,
Qwen3-shaped models with random weights, and `ppo_update` timed (tokens/s, peak memory, MFU)
through the torch backend (plain, LoRA) and DeepSpeed. A plain sibling of bench/gpu_check.py,
imported from there."""
from __future__ import annotations

import gc
import json
import os
import random
import statistics
import time
import traceback
from pathlib import Path

from gpu_check_carry import REPO, Missing, need

PEAK_BF16_DATASHEET = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}

QWEN3_06B = {"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
             "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
             "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
             "rope_theta": 1000000, "tie_word_embeddings": True}
TINY = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}


# --------------------------------------------------------------------------- the steps
class Ctx:
    def __init__(self, args, device: str, site: Path, log):
        self.args, self.device, self.site, self.log = args, device, site, log
        self.tiny = args.tiny
        self.peak = None  # bf16 FLOP/s measured by step 2
        self.card = "CPU"
        self.left = lambda: float("inf")  # seconds left of --budget (main sets it)

    def sync(self):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()


def _free(ctx: Ctx) -> None:
    gc.collect()
    if ctx.device == "cuda":
        import torch

        torch.cuda.empty_cache()


def qwen3(shape: dict, tiny: bool):
    from transformers import Qwen3Config

    fields = dict(shape)
    if tiny:
        fields.update(TINY)
        for k in ("bos_token_id", "eos_token_id"):  # the 4B's ids are outside a tiny vocabulary
            fields.pop(k, None)
    return Qwen3Config(**fields)


def qwen3_4b_shape() -> dict:
    raw = json.loads((REPO / "configs" / "models" / "qwen3-4b.json").read_text())
    return {k: v for k, v in raw.items() if k not in ("architectures", "model_type", "torch_dtype")}


def build(config, device: str, dtype):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: a 4B model in seconds, not minutes
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model


def model_flops(config, n_params: int, tokens: int, head_tokens: int, context: int) -> float:
    """Training FLOPs of one step (bench/gpu_bench.py's convention: 6 x non-embedding
    parameters per token, the tied LM head only on completion tokens, causal attention; no
    recomputation counted)."""
    embed = config.vocab_size * config.hidden_size
    attn = 6 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * context
    return 6 * (n_params - embed) * tokens + 6 * embed * head_tokens + attn * tokens


def random_samples(n: int, prompt: int, completion: int, vocab: int, seed: int):
    from mars_core.training.trainer import Sample

    rng = random.Random(seed)
    return [Sample(tuple(rng.randrange(1, vocab) for _ in range(prompt)),
                   tuple(rng.randrange(1, vocab) for _ in range(completion)),
                   rng.choice((-1.0, 1.0))) for _ in range(n)]


def _deepspeed_env() -> None:
    """One rank, no launcher: the torch.distributed environment init_deepspeed needs."""
    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + os.getpid() % 1000),
                 "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        os.environ.setdefault(k, v)


def ppo_one(ctx: Ctx, label: str, config, grad_ckpt: bool, backend: str = "torch",
            lora_rank: int = 0) -> dict:
    """One shape's update, timed. `lora_rank`: the learning presets' way (`trainer.lora`,
    adapters on the attention projections, kl_coef 0.05 against the start policy with the
    adapters off); its FLOPs are counted as the full update's 6N a token, which for LoRA is the
    forward and input-gradient 4N plus the reference's 2N forward."""
    import torch

    need("pydantic", *(("deepspeed",) if backend == "deepspeed" else ()),
         *(("peft",) if lora_rank else ()))
    from mars_core.config.train import (AlgorithmConfig, DeepSpeedConfig, LoraConfig, OptimConfig,
                                        TrainerConfig)
    from mars_core.training.trainer import (TorchUpdater, enable_gradient_checkpointing,
                                            make_optimizer, ppo_update)

    a = ctx.args
    seq, completion, micro, accum, steps = ((64, 16, 2, 2, 1) if ctx.tiny else
                                            (a.seq, a.completion, a.micro_batch, a.accumulation,
                                             a.train_steps))
    # fp32 weights, as both backends load them (torch: master weights under bf16 autocast;
    # DeepSpeed: it keeps fp32 masters and computes in bf16)
    model = build(config, ctx.device, torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    enable_gradient_checkpointing(model, grad_ckpt)
    optim = OptimConfig(lr=1e-6, warmup_steps=0, micro_batch_size=micro, minibatches=1)
    algo = AlgorithmConfig(kl_coef=0.05 if lora_rank else 0.0)
    engine = opt = sched = ref = None
    if lora_rank:
        from mars_core.training import lora

        model = lora.attach(model, LoraConfig(rank=lora_rank))
        ref = lora.AdaptersOff(model)
    if backend == "deepspeed":
        from mars_core.training.deepspeed_backend import init_deepspeed

        _deepspeed_env()
        trainer = TrainerConfig(backend="deepspeed", gradient_checkpointing=grad_ckpt,
                                deepspeed=DeepSpeedConfig(zero_stage=2))
        engine, updater = init_deepspeed(model, trainer, optim, True, steps + 1, world=1)
        model = engine.module
    else:
        opt, sched = make_optimizer(model, optim, steps + 1)
        updater = TorchUpdater(model, opt, sched, optim.grad_clip)
    n = micro * accum
    if ctx.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, loss = [], None
    try:
        for step in range(steps + 1):  # the first warms up (allocations, kernels, optimizer state)
            samples = random_samples(n, seq - completion, completion, config.vocab_size, step)
            ctx.sync()
            t0 = time.perf_counter()
            m = ppo_update(model, ref, updater, samples, algo, optim, pad_id=0, seed=step,
                           bf16=backend == "torch", progress=False)
            ctx.sync()
            if step:
                times.append(time.perf_counter() - t0)
            loss = m["loss"]
        peak_mem = torch.cuda.max_memory_allocated() / 2**30 if ctx.device == "cuda" else None
    finally:
        del model, opt, sched, updater, engine, ref
        if backend == "deepspeed" and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        _free(ctx)
    sec = statistics.median(times)
    tokens = n * seq
    flops = model_flops(config, n_params, tokens, n * (completion + 1), seq // 2)
    datasheet = next((v for k, v in PEAK_BF16_DATASHEET.items() if k in ctx.card), None)
    if not (loss == loss):  # NaN
        raise RuntimeError(f"{label}: the loss is NaN")
    backend_name = backend if backend == "torch" else "deepspeed ZeRO-2"
    return {"model": label, "backend": backend_name + (f", LoRA rank {lora_rank}, KL 0.05"
                                                       if lora_rank else ""),
            "params_b": n_params / 1e9, "gradient_checkpointing": grad_ckpt,
            "tokens_per_step": tokens, "seq": seq, "completion": completion,
            "micro_batch": micro, "accumulation": accum, "step_s": sec,
            "tokens_per_s": tokens / sec, "tflops": flops / sec / 1e12,
            "mfu_measured_peak": flops / sec / ctx.peak if ctx.peak else None,
            "mfu_datasheet": flops / sec / datasheet if datasheet else None,
            "peak_mem_gib": peak_mem, "loss": loss}


def step_ppo(ctx: Ctx) -> dict:
    need("transformers", "pydantic", "polars")
    rows, errors, missing = [], [], []
    # the full 4B update last: fp32 weights, gradients and AdamW states are 64 GB, and an 80 GB
    # card may end it out of memory (recorded as such)
    plan = [("Qwen3-0.6B shape", qwen3(QWEN3_06B, ctx.tiny), False, "torch", 0),
            ("Qwen3-4B shape", qwen3(qwen3_4b_shape(), ctx.tiny), False, "torch", 16),
            ("Qwen3-4B shape", qwen3(qwen3_4b_shape(), ctx.tiny), True, "torch", 0)]
    for label, config, ckpt, backend, rank in plan:
        name = f"{label} ({backend}{f', LoRA {rank}' if rank else ''})"
        if ctx.left() < 60 and not ctx.tiny:
            errors.append(f"{name}: not run (out of time)")
            continue
        try:
            rows.append(ppo_one(ctx, label, config, ckpt, backend, rank))
        except Missing as e:  # one row's package (peft for LoRA): the other rows still run
            missing.append(str(e))
            errors.append(f"{name}: {e}")
        except Exception as e:  # noqa: BLE001  (one shape failing, e.g. out of memory)
            ctx.log.write(f"[ppo_update {name}]\n{traceback.format_exc()}\n")
            errors.append(f"{name}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
            _free(ctx)
    if not rows and missing and len(missing) == len(errors):
        raise Missing(missing[0])  # every row lacks the same package: one line naming it
    if not rows:
        raise RuntimeError("; ".join(errors))
    return {"rows": rows, "errors": errors}


def step_deepspeed(ctx: Ctx) -> dict:
    """The same update through the DeepSpeed backend (ZeRO-2, one rank: bench/gpu_bench.py's
    path), last: its first start may compile a helper (on a CPU it does, for minutes)."""
    need("transformers", "pydantic", "polars", "deepspeed")
    if ctx.left() < 90 and not ctx.tiny:
        return {"not_run": f"out of time ({ctx.left():.0f} s of --budget left; it needs 90)"}
    if not ctx.args.deepspeed:
        return {"not_run": "on a CPU DeepSpeed first compiles a helper (minutes): --deepspeed "
                           "runs it"}
    return {"rows": [ppo_one(ctx, "Qwen3-0.6B shape", qwen3(QWEN3_06B, ctx.tiny), False,
                             "deepspeed")], "errors": []}
