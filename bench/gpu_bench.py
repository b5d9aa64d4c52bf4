"""GPU figures for a Qwen3-4B-shaped policy with random weights (no weights are needed to
measure speed): the PPO training step through the DeepSpeed backend (ZeRO on one GPU) in
tokens/s and MFU, its peak memory, and transformers generation tokens/s at a few batch sizes
through the in-process engine.

    python bench/gpu_bench.py                      # on the GPU machine (deepspeed installed)
    python bench/gpu_bench.py --tiny --steps 2     # a seconds-long check of the script on CPU

MFU = model FLOPs / step time / the GPU's dense bf16 peak. Model FLOPs of the step (PaLM
convention, no recomputation counted): 6 x (non-embedding parameters) per token, plus the
LM head 6 x hidden x vocab for each completion token only (the trainer keeps only those
logits), plus causal attention 6 x layers x heads x head_dim x context per token (QK^T and AV,
half the square). The training step is `ppo_update` with kl_coef 0 (one forward and one
backward per micro-batch, no reference model), exactly what `trainer.backend: deepspeed` runs.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mars_core.config.train import (AlgorithmConfig, DeepSpeedConfig, OptimConfig,  # noqa: E402
                                    TrainerConfig)
from mars_core.training.trainer import (Sample, TorchUpdater,  # noqa: E402
                                        enable_gradient_checkpointing, make_optimizer, ppo_update)
from mars_core.types import SamplingParams  # noqa: E402

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12}  # dense, per GPU
TINY = {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 4096}


def build_model(args, device):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(args.model_config)
    if args.tiny:
        for k, v in TINY.items():
            setattr(config, k, v)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32 if device == "cpu"
                                             else torch.bfloat16)
    return model.to(device), config


def model_flops(config, n_params: int, tokens: int, head_tokens: int, context: int) -> float:
    """Training FLOPs of one step (see the module docstring)."""
    embed = config.vocab_size * config.hidden_size
    body = n_params - embed  # tied head: the embedding matrix is counted once, below
    attn = 6 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * context
    return 6 * body * tokens + 6 * embed * head_tokens + attn * tokens


def peak_flops(args) -> float | None:
    if args.peak_tflops:
        return args.peak_tflops * 1e12
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def random_samples(n: int, prompt: int, completion: int, vocab: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    return [Sample(tuple(rng.randrange(vocab) for _ in range(prompt)),
                   tuple(rng.randrange(vocab) for _ in range(completion)),
                   rng.choice((-1.0, 1.0))) for _ in range(n)]


def bench_train(args, device) -> dict:
    model, config = build_model(args, device)
    n_params = sum(p.numel() for p in model.parameters())
    enable_gradient_checkpointing(model, args.gradient_checkpointing)
    optim = OptimConfig(lr=1e-6, warmup_steps=0, micro_batch_size=args.micro_batch, minibatches=1)
    algo = AlgorithmConfig(kl_coef=0.0)
    bf16 = device == "cuda"
    if args.backend == "deepspeed":
        from mars_core.training.deepspeed_backend import init_deepspeed

        for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533", "RANK": "0",
                     "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
            os.environ.setdefault(k, v)
        trainer = TrainerConfig(backend="deepspeed", gradient_checkpointing=args.gradient_checkpointing,
                                deepspeed=DeepSpeedConfig(zero_stage=args.zero,
                                                          offload_optimizer=args.offload))
        engine, updater = init_deepspeed(model, trainer, optim, bf16, args.steps + 1, world=1)
        model = engine.module
    else:
        opt, sched = make_optimizer(model, optim, args.steps + 1)
        updater = TorchUpdater(model, opt, sched, optim.grad_clip)
    n = args.micro_batch * args.accumulation
    prompt = args.seq - args.completion
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(args.steps + 1):  # the first step warms up (allocations, kernels)
        samples = random_samples(n, prompt, args.completion, config.vocab_size, step)
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        ppo_update(model, None, updater, samples, algo, optim, pad_id=0,
                   seed=step, bf16=bf16 and args.backend == "torch", progress=False)
        if device == "cuda":
            torch.cuda.synchronize()
        if step:
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    tokens = n * args.seq
    flops = model_flops(config, n_params, tokens, n * (args.completion + 1), args.seq // 2)
    peak = peak_flops(args)
    out = {"params_b": n_params / 1e9, "step_s": seconds, "tokens_per_s": tokens / seconds,
           "tflops": flops / seconds / 1e12, "mfu": flops / seconds / peak if peak else None,
           "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None}
    del model, updater
    return out


def bench_generate(args, device) -> list[dict]:
    from mars_core.engines.hf import HFEngine

    model, config = build_model(args, device)

    class _Tok:  # the engine needs decode/eos/pad only; ids are random anyway
        eos_token_id = pad_token_id = 0

        def decode(self, ids, skip_special_tokens=False):
            return " ".join(map(str, ids))

    model.generation_config.eos_token_id = None
    rows = []
    for batch in args.gen_batches:
        engine = HFEngine(model, _Tok(), batch_size=batch)
        engine.eos_ids = frozenset()  # random weights: never stop early, every row runs full
        prompts = [list(s.prompt_ids) for s in random_samples(batch, args.gen_prompt, 1,
                                                              config.vocab_size, batch)]
        params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0,
                                max_new_tokens=args.gen_tokens, seed=batch)
        engine.generate(prompts[:1], SamplingParams(max_new_tokens=2))  # warm-up
        engine.stats.update(generated_tokens=0, seconds=0.0)
        engine.generate(prompts, params)
        rows.append({"batch": batch, "tokens_per_s": engine.tokens_per_second()})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-config", default="configs/models/qwen3-4b.json")
    p.add_argument("--tiny", action="store_true", help="a tiny shape of the same architecture")
    p.add_argument("--backend", choices=("deepspeed", "torch"), default="deepspeed")
    p.add_argument("--zero", type=int, choices=(2, 3), default=2)
    p.add_argument("--offload", action="store_true", help="optimizer states on the CPU")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--completion", type=int, default=256, help="completion tokens of those")
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--accumulation", type=int, default=4, help="micro-batches per step")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--gen-batches", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--gen-prompt", type=int, default=512)
    p.add_argument("--gen-tokens", type=int, default=128)
    p.add_argument("--peak-tflops", type=float, help="the device's dense bf16 peak")
    p.add_argument("--skip-train", action="store_true")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (no GPU: figures are a check only)"
    print(f"device: {name}; model: {args.model_config}{' (tiny)' if args.tiny else ''}")
    if not args.skip_train:
        t = bench_train(args, device)
        mfu = f"{t['mfu']:.1%}" if t["mfu"] is not None else "n/a"
        mem = f"{t['peak_mem_gib']:.1f} GiB" if t["peak_mem_gib"] is not None else "n/a"
        print(f"train ({args.backend}, ZeRO-{args.zero}{', offload' if args.offload else ''}"
              f"{', grad ckpt' if args.gradient_checkpointing else ''}): {t['params_b'] * 1e3:.1f}M params, "
              f"{args.micro_batch * args.accumulation} x {args.seq} tokens/step, "
              f"{t['step_s']:.2f} s/step, {t['tokens_per_s']:.0f} tokens/s, "
              f"{t['tflops']:.1f} TFLOP/s, MFU {mfu}, peak memory {mem}")
        if device == "cuda":
            torch.cuda.empty_cache()
    for row in bench_generate(args, device):
        print(f"generate (transformers, in-process engine): batch {row['batch']:>3}, "
              f"{args.gen_prompt}-token prompts, {args.gen_tokens} new tokens: "
              f"{row['tokens_per_s']:.0f} tokens/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
