"""Throughput alone and beside a second CPU-bound torch process, under three thread settings.

Each case runs in a fresh Python process (OpenMP reads its settings once, at start): torch's
defaults (OMP_WAIT_POLICY unset), `OMP_WAIT_POLICY=PASSIVE` (what mars_core/run/threads.py
sets), and one torch thread (`OMP_NUM_THREADS=1`). Each runs alone, then beside a second process
started by this bench: torch looping 1024 x 1024 fp32 matmuls with its own defaults (as a
notebook or another job would run, all cores, spinning threads). Per case it prints
iterations/s of:

- `matmul fp32`, `matmul bf16`: 64 x 576 by 576 x 1536, the embedded model's MLP shape at
  small batch;
- `train step`: forward and backward of a tiny Llama (transformers `LlamaForCausalLM`, hidden
  576, 2 layers, vocabulary 4096) on 4 sequences of 64 tokens;
- `decode`: one token at a time through the same model with its KV cache, batch 1 (play).

and the load average when the case started (another job on the machine shows there), then one
Markdown table (docs/performance.md, "Under CPU contention"). About 2.5 minutes on 2 cores:

    python bench/contention_bench.py [--seconds 2.5]

Prints figures; asserts nothing.
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

CASES = {"default": {}, "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
         "1 thread": {"OMP_NUM_THREADS": "1"}}
WORKLOADS = ("matmul fp32", "matmul bf16", "train step", "decode")
# the other job, with torch's defaults (as a notebook or another run starts it: every core,
# threads that spin while they wait), until SIGTERM; it prints its own rate then. `big`: 1024 x
# 1024 fp32 matmuls, every core busy all the time; `small`: this bench's own small matmul, a job
# whose threads wait (spin) between short pieces of work, as a second training run's do.
OTHER = {"big": "torch.randn(1024, 1024), torch.randn(1024, 1024)",
         "small": "torch.randn(64, 576), torch.randn(576, 1536)"}
LOADS = ("alone", *(f"beside {k}" for k in OTHER))
HOG = """
import signal, sys, time, torch
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
a, b = {operands}; n = 0; t = time.perf_counter()
print("ready", flush=True)
try:
    while True:
        a @ b; n += 1
finally:
    print(f"{{n / (time.perf_counter() - t):.2f}}", flush=True)
"""


def _rate(step, seconds: float) -> float:
    """Iterations per second of `step` over `seconds`, after a warm-up of a fifth of that."""
    end = time.perf_counter() + seconds / 5
    while time.perf_counter() < end:
        step()
    n, start = 0, time.perf_counter()
    while (now := time.perf_counter()) - start < seconds:
        step()
        n += 1
    return n / (now - start)


def worker(seconds: float) -> dict:
    """Every workload's iterations/s in this process (its settings as it was started with)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    out = {}
    for name, dtype in (("matmul fp32", torch.float32), ("matmul bf16", torch.bfloat16)):
        a, b = torch.randn(64, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
        out[name] = _rate(lambda: a @ b, seconds)
    cfg = LlamaConfig(vocab_size=4096, hidden_size=576, intermediate_size=1536,
                      num_hidden_layers=2, num_attention_heads=9, num_key_value_heads=3,
                      max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg)
    ids = torch.randint(0, cfg.vocab_size, (4, 64))

    def train_step():
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    out["train step"] = _rate(train_step, seconds)
    model.eval()
    with torch.no_grad():
        prompt = model(input_ids=ids[:1], use_cache=True)
        token = prompt.logits[:, -1:].argmax(-1)

        def decode():  # one more token after the 64-token prompt, its cache copied back
            cache = prompt.past_key_values
            model(input_ids=token, past_key_values=cache, use_cache=True)
            cache.crop(-1)

        out["decode"] = _rate(decode, seconds)
    out["threads"] = torch.get_num_threads()
    return out


def _env(case: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    return {**env, **case}


def run_case(name: str, load: str, seconds: float) -> dict:
    """One worker process under the settings `name`, alone or beside the other job `load`."""
    hog = None
    if load != "alone":
        code = HOG.format(operands=OTHER[load.split()[-1]])
        hog = subprocess.Popen([sys.executable, "-c", code], env=_env({}), stdout=subprocess.PIPE,
                               text=True)
        assert hog.stdout.readline().strip() == "ready"
    try:
        loadavg = os.getloadavg()[0]
        done = subprocess.run([sys.executable, __file__, "--worker", "--seconds", str(seconds)],
                              env=_env(CASES[name]), capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        if hog is not None:
            hog.send_signal(signal.SIGTERM)
            rest, _ = hog.communicate(timeout=60)
    result["load average"] = loadavg
    if hog is not None:
        result["other job"] = float(rest.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="per workload and case")
    ap.add_argument("--rounds", type=int, default=1,
                    help="every case this many times, interleaved; the table gives the median")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.seconds)))
        return
    started = time.perf_counter()
    runs: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.rounds):
        for name in CASES:
            for load in LOADS:
                r = run_case(name, load, args.seconds)
                runs.setdefault((name, load), []).append(r)
                print(f"{name:9} {load:12} " + "  ".join(f"{w} {r[w]:7.1f}/s" for w in WORKLOADS)
                      + f"  threads {r['threads']}  load avg {r['load average']:.2f}"
                      + (f"  other job {r['other job']:.1f}/s" if "other job" in r else ""),
                      flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s in all; the median of {args.rounds} round(s)\n")
    cols = [(n, ld) for n in CASES for ld in LOADS]
    cell = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in runs.items()}
    print("| iterations/s | " + " | ".join(f"{n}, {ld}" for n, ld in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for w in WORKLOADS:
        print(f"| {w} | " + " | ".join(f"{cell[c][w]:.1f}" for c in cols) + " |")
    print("| the other job's own | " + " | ".join(
        f"{cell[c]['other job']:.1f}" if "other job" in cell[c] else "-" for c in cols) + " |")
    print("| load average at start | " + " | ".join(f"{cell[c]['load average']:.2f}"
                                                  for c in cols) + " |")


if __name__ == "__main__":
    main()
