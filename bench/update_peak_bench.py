"""The update against the machine's peak: the same Kuhn update before and after the rework.

One command, one table: it measures the bf16 matmul peak of this machine (a large bf16
matmul), then runs the same PPO update (the embedded model, a Kuhn batch) in a fresh process
per variant and prints, per variant, seconds, the batch's tokens per second (prompt and
completion tokens of every sample), the model arithmetic the update ran (matmul FLOPs of the
token positions its forward and backward passes computed, padding included, counted from the
model's calls) as GFLOP/s and as a fraction of the measured peak, the same for the batch's
arithmetic (what `before` runs: a row per sample, shared prefixes once per micro-batch) over
each variant's seconds (the issue's measure: the work the batch needs, done in that time),
and the process's peak RSS:

    python bench/update_peak_bench.py                       # 64 samples, full fine-tuning
    python bench/update_peak_bench.py --n 256 --lora        # the kuhn_compact preset's update
    python bench/update_peak_bench.py --n 256 --lora \\
        --samples runs/kuhn_compact/iter_0004/compute_advantages/samples.parquet

Variants: `before`, the update as it was (a row per sample, the for-loop AdamW); `after`,
samples with the same sequence sharing one row of a forward pass (`mars_core.training.chunks`)
and the fused AdamW (`trainer.make_optimizer`). Without `--samples` the batch is a Kuhn batch
built from compact prompts of the game's situations (a seat, one of its two turns, a card: 12
situations; each reply one of the two legal actions), the advantages random: the arithmetic
is what matters.
Run it on an otherwise idle machine: two torch processes on the same cores slow each other
(see `bench/contention_bench.py`). Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import mars_core.run.threads  # noqa: E402,F401  (first: the thread settings, before torch loads)

VARIANTS = ("before", "after")


def matmul_peak(seconds: float = 3.0, n: int = 2048) -> float:
    """bf16 matmul GFLOP/s of an n x n by n x n product, the best of repeated runs."""
    import torch

    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    torch.mm(a, b)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2 * n ** 3 / (time.perf_counter() - t) / 1e9)
    return best


def kuhn_batch(tokenizer, n: int, seed: int = 0):
    """`n` Kuhn samples with compact prompts: a random seat, card and history each, the reply
    a legal action in answer tags (as the preset's replies are)."""
    from mars_core.training.trainer import Sample

    rng = random.Random(seed)
    histories = [("none", ("<PASS>", "<BET>")), ("player 0 passed", ("<PASS>", "<BET>")),
                 ("player 0 bet", ("<PASS>", "<BET>")),
                 ("player 0 passed, player 1 bet", ("<PASS>", "<BET>"))]
    out = []
    for _ in range(n):
        seat = rng.randrange(2)
        bets, legal = histories[rng.choice((1, 2) if seat else (0, 3))]  # the seat's turns
        system = (f"Kuhn poker, you are player {seat} ({'first' if seat == 0 else 'second'} to "
                  "act). Cards J < Q < K; each player antes 1 chip and holds one card. <PASS> "
                  "checks, or folds to a bet. <BET> bets 1 chip, or calls a bet. At a showdown "
                  "the higher card takes the pot.\nAnswer with one legal action in answer tags, "
                  "e.g. <answer><BET></answer>. A bad answer forfeits your chips.")
        user = f"Bets: {bets}\nLegal: {' '.join(legal)}\nYour card: {rng.choice('JQK')}"
        prompt = tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            tokenize=False, add_generation_prompt=True) + "<answer>"
        reply = rng.choice(legal) + "</answer>"
        out.append(Sample(tuple(tokenizer(prompt)["input_ids"]),
                          tuple(tokenizer(reply)["input_ids"]), rng.uniform(-1, 1), "kuhn_poker"))
    return out


def _count_flops(inner, trainable_share: float) -> list[float]:
    """Hooks on `inner` (a transformers causal LM) that add each call's matmul FLOPs into the
    returned list's [0]: 2 x the decoder layers' weights x the token positions of the call
    (padding included), 2 x hidden x vocab x the positions the LM head computes, and with
    gradients once more for the activations' gradients and `trainable_share` of it for the
    weights' (attention scores left out: a few percent at these lengths)."""
    import torch

    total = [0.0]
    body = sum(p.numel() for p in inner.model.layers.parameters())
    head = inner.lm_head.weight.numel()

    def add(flops: float) -> None:
        total[0] += flops * ((2 + trainable_share) if torch.is_grad_enabled() else 1)

    inner.model.register_forward_pre_hook(
        lambda _m, _a, kwargs: add(2 * body * kwargs["input_ids"].numel()), with_kwargs=True)
    inner.lm_head.register_forward_pre_hook(
        lambda _m, args: add(2 * head * args[0].numel() / args[0].shape[-1]))
    return total


def run_variant(variant: str, args) -> dict:
    """One update in this process; its figures."""
    import torch

    from mars_core.config import AlgorithmConfig, OptimConfig
    from mars_core.config.train import LoraConfig
    from mars_core.models.weights import load_model, load_tokenizer, resolve_model
    from mars_core.training import lora
    from mars_core.training.trainer import TorchUpdater, load_samples, make_optimizer, ppo_update

    path = resolve_model("embedded")
    tok = load_tokenizer(path)
    samples = load_samples(args.samples)[:args.n] if args.samples else kuhn_batch(tok, args.n)
    model = load_model(path)
    if args.lora:
        model = lora.attach(model, LoraConfig(rank=16, alpha=32.0, target_modules=[
            "q_proj", "k_proj", "v_proj", "o_proj"]))  # the kuhn_compact preset's
        ref = lora.AdaptersOff(model)
    else:
        ref = load_model(path)
    share = (sum(p.numel() for p in model.parameters() if p.requires_grad)
             / sum(p.numel() for p in model.parameters()))
    flops = _count_flops(model.get_base_model() if args.lora else model, share)
    if not args.lora:  # the reference model's passes (with LoRA: the same module, hooked)
        ref_flops = _count_flops(ref, 0.0)
    algo = AlgorithmConfig(kl_coef=0.05, clip_eps_high=0.28, is_cap=2.0, dual_clip=1.4)
    optim = OptimConfig(lr=2e-5, warmup_steps=1, micro_batch_size=args.micro,
                        minibatches=args.minibatches, micro_batch_tokens=args.micro_tokens)
    opt, sched = make_optimizer(model, optim, 100, fused=variant == "after")
    torch.manual_seed(0)
    start = time.perf_counter()
    ppo_update(model, ref, TorchUpdater(model, opt, sched, optim.grad_clip), samples, algo,
               optim, pad_id=tok.pad_token_id, seed=0, bf16=not args.fp32, progress=False,
               distinct=variant == "after")
    seconds = time.perf_counter() - start
    if not args.lora:
        flops[0] += ref_flops[0]
    tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    return {"variant": variant, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "gflop": flops[0] / 1e9, "gflop_per_s": flops[0] / 1e9 / seconds,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "samples": len(samples), "distinct": len({(s.prompt_ids, s.completion_ids)
                                                      for s in samples})}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=64, help="samples in the update")
    p.add_argument("--samples", type=Path, help="a run's samples.parquet (default: synthetic)")
    p.add_argument("--minibatches", type=int, default=4, help="optimizer steps")
    p.add_argument("--micro", type=int, default=16, help="optim.micro_batch_size")
    p.add_argument("--micro-tokens", type=int, default=None, help="optim.micro_batch_tokens")
    p.add_argument("--lora", action="store_true", help="train a LoRA adapter (rank 16)")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    p.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # a child's run
    args = p.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args)))
        return
    from mars_core.models.precision import cpu_description

    peak = matmul_peak()
    print(f"machine: {cpu_description()}; bf16 matmul peak {peak:.0f} GFLOP/s; "
          f"{args.n} samples, {args.minibatches} optimizer steps, micro-batch {args.micro}, "
          f"{'LoRA' if args.lora else 'full fine-tuning'}, {'fp32' if args.fp32 else 'bf16'}")
    rows = []
    for variant in VARIANTS:
        done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--variant", variant],
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"update_peak_bench: {variant} failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"batch: {rows[0]['samples']} samples, {rows[0]['distinct']} distinct sequences")
    work = rows[0]["gflop"]  # the batch's arithmetic with a row per sample (prefixes shared)
    print("| variant | seconds | tokens/s | GFLOP run | GFLOP/s | of peak | batch GFLOP/s "
          "| batch of peak | peak RSS GB |")
    print("|---" * 9 + "|")
    for r in rows:
        print(f"| {r['variant']} | {r['seconds']:.1f} | {r['tokens_per_s']:.0f} | {r['gflop']:.0f} "
              f"| {r['gflop_per_s']:.1f} | {r['gflop_per_s'] / peak:.1%} "
              f"| {work / r['seconds']:.1f} | {work / r['seconds'] / peak:.1%} "
              f"| {r['peak_rss_gb']:.2f} |")
    print(f"after/before: {rows[0]['seconds'] / rows[1]['seconds']:.2f}x faster")


if __name__ == "__main__":
    main()
