"""The format warm-up's peak memory and time per step, by `warmup.micro_batch_size`.

The warm-up is a full fine-tune on the policy's own prompts; a preset with long prompts (Mini
Hanabi's run to ~900 tokens) holds the activations of the whole batch at once unless the batch
goes through the model a micro-batch at a time (gradient accumulation: the same step). Each
setting runs in a process of its own (the peak RSS is that process's), on the same examples
and seed, and the table shows the loss of every step, so equal steps show as equal losses:

    python bench/warmup_bench.py --config configs/learning/generalist.yaml --micro 8,2,1 --steps 3

The machine must be otherwise idle, and have the memory: the generalist's batch of 8 at once
peaked at ~18.5 GB. Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import mars_core.run.threads  # noqa: E402,F401  (first: the thread settings, before torch loads)


def one(config: str, micro: int, steps: int) -> dict:
    """`steps` warm-up steps at `micro` examples per forward pass, in this process."""
    from mars_core.run import offline

    offline.apply()
    from mars_core.config import load_config
    from mars_core.models.precision import cpu_description
    from mars_core.training.warmup import sft_steps
    from tasks.engine_factory import make_engine, use_bf16
    from mars_core.models.weights import resolve_model
    from tasks.train import _warmup_examples

    cfg = load_config(config)
    w = cfg.warmup
    engine = make_engine(cfg, str(resolve_model(cfg.model.path)), backend="hf", fp32_weights=True)
    examples = _warmup_examples(cfg, engine.tokenizer, w.steps * w.batch_size, 0)
    lengths = sorted(len(p) + len(t) for p, t in examples)
    start = time.perf_counter()
    losses = sft_steps(engine.model, examples, steps=steps, batch_size=w.batch_size, lr=w.lr,
                       pad_id=engine.tokenizer.pad_token_id, seed=0,
                       bf16=use_bf16(cfg, "update"), share_prefix=cfg.model.share_prefix,
                       progress=False, micro_batch_size=micro)
    seconds = time.perf_counter() - start
    return {"micro": micro, "batch": w.batch_size, "s_per_step": seconds / steps,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "losses": [round(x, 4) for x in losses], "examples": len(examples),
            "tokens_mean": sum(lengths) / len(lengths), "tokens_max": lengths[-1],
            "cpu": cpu_description()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/learning/generalist.yaml")
    ap.add_argument("--micro", default="8,2,1", help="comma-separated micro-batch sizes")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(one(args.config, args.child, args.steps)))
        return
    rows = []
    for micro in (int(m) for m in args.micro.split(",")):
        out = subprocess.run([sys.executable, __file__, "--config", args.config, "--steps",
                              str(args.steps), "--child", str(micro)],
                             capture_output=True, text=True, cwd=REPO)
        if out.returncode:
            print(f"micro {micro}: failed (exit {out.returncode}): "
                  f"{(out.stderr.strip().splitlines() or ['?'])[-1]}")
            continue
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if not rows:
        return
    r0 = rows[0]
    print(f"{args.config}: warm-up batch {r0['batch']}, {r0['examples']} examples of "
          f"{r0['tokens_mean']:.0f} tokens on average (longest {r0['tokens_max']}); "
          f"{r0['cpu']}")
    print("| micro-batch | peak RSS (GB) | s/step | losses |")
    print("|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['micro']} | {r['peak_rss_gb']:.1f} | {r['s_per_step']:.1f} | "
              f"{', '.join(f'{x:.4f}' for x in r['losses'])} |")


if __name__ == "__main__":
    main()
