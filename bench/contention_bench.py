"""Throughput alone and beside a second CPU-bound torch process, under three thread settings.

Each setting has a Python process of its own, started fresh with it (OpenMP reads its settings
once, when torch loads): torch's defaults (OMP_WAIT_POLICY unset), `OMP_WAIT_POLICY=PASSIVE`
(what mars_core/run/threads.py sets) and one torch thread (`OMP_NUM_THREADS=1`). The three run
their workloads one after the other, never together, in rounds (the table gives each figure's
median over the rounds), alone, then beside another job started by this bench with torch's
defaults (every core, threads that spin while they wait, as a notebook or another run has
them):

- `beside big`: 1024 x 1024 fp32 matmuls, every core busy all the time;
- `beside small`: the small matmul below in a loop, a job whose threads wait (spin) between
  short pieces of work, as a second training run's do.

The workloads, iterations per second and per CPU-second of the worker's process (all its
threads: a thread that spins while it waits burns CPU time and does no work; this figure moves
less with whatever else the machine runs):

- `matmul fp32`, `matmul bf16`: 64 x 576 by 576 x 1536, the embedded model's MLP shape at
  small batch;
- `train step`: forward and backward of a tiny Llama (transformers `LlamaForCausalLM`, hidden
  576, 2 layers, vocabulary 4096) on 4 sequences of 64 tokens;
- `decode`: one token through the same model with a 64-token KV cache, batch 1 (play).

Also the other job's own rate while each setting ran (its threads and ours share the cores) and
the load average before each run (any other work on the machine shows there: the figures are
only as quiet as the machine). About 2.5 minutes on 2 cores at a load average near 10 (10
minutes near 17):

    python bench/contention_bench.py [--seconds 0.5] [--rounds 3]

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
OTHER = {"big": "torch.randn(1024, 1024), torch.randn(1024, 1024)",
         "small": "torch.randn(64, 576), torch.randn(576, 1536)"}
LOADS = ("alone", *(f"beside {k}" for k in OTHER))
# the other job: its matmuls in a loop until killed; SIGUSR1 prints its count and clock
HOG = """
import signal, time, torch
n = 0
signal.signal(signal.SIGUSR1, lambda *_: print(n, time.perf_counter(), flush=True))
a, b = {operands}
print("ready", flush=True)
while True:
    a @ b; n += 1
"""


def _rate(step, seconds: float) -> tuple[float, float]:
    """Iterations of `step` per second and per CPU-second of this process (all its threads:
    a thread that spins while it waits burns CPU time and does no work) over `seconds`, after
    a warm-up of a fifth of that."""
    end = time.perf_counter() + seconds / 5
    while time.perf_counter() < end:
        step()
    n, start, cpu = 0, time.perf_counter(), time.process_time()
    while (now := time.perf_counter()) - start < seconds:
        step()
        n += 1
    return n / (now - start), n / max(time.process_time() - cpu, 1e-9)


def worker(seconds: float) -> None:
    """Every workload's iterations/s, each time a line comes on stdin (its thread settings as
    this process was started with); one JSON line each."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    steps = {}
    for name, dtype in (("matmul fp32", torch.float32), ("matmul bf16", torch.bfloat16)):
        a, b = torch.randn(64, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
        steps[name] = lambda a=a, b=b: a @ b
    cfg = LlamaConfig(vocab_size=4096, hidden_size=576, intermediate_size=1536,
                      num_hidden_layers=2, num_attention_heads=9, num_key_value_heads=3,
                      max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg)
    ids = torch.randint(0, cfg.vocab_size, (4, 64))

    def train_step():
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    with torch.no_grad():
        prompt = model(input_ids=ids[:1], use_cache=True)
    token = prompt.logits[:, -1:].argmax(-1)

    @torch.no_grad()
    def decode():  # one more token after the 64-token prompt, then the cache cut back to it
        model(input_ids=token, past_key_values=prompt.past_key_values, use_cache=True)
        prompt.past_key_values.crop(-1)

    steps["train step"], steps["decode"] = train_step, decode
    print("ready", flush=True)
    for _ in sys.stdin:
        out = {}
        for name in WORKLOADS:
            out[name], out[f"{name} per CPU-s"] = _rate(steps[name], seconds)
        print(json.dumps({**out, "threads": torch.get_num_threads()}), flush=True)


def _env(case: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    return {**env, **case}


def _start(args: list[str], env: dict) -> subprocess.Popen:
    """A process of ours, once it says it is ready."""
    proc = subprocess.Popen([sys.executable, *args], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line == "ready", f"{args[:2]} did not start: {line!r}"
    return proc


def _count(hog: subprocess.Popen) -> tuple[float, float]:
    """The other job's matmuls so far, and its clock."""
    hog.send_signal(signal.SIGUSR1)
    n, t = hog.stdout.readline().split()
    return float(n), float(t)


def run_case(worker: subprocess.Popen, hog: subprocess.Popen | None) -> dict:
    """One run of every workload by `worker`: its figures, the load average before it, the
    other job's rate while it ran."""
    loadavg = os.getloadavg()[0]
    before = _count(hog) if hog is not None else None
    worker.stdin.write("run\n")
    worker.stdin.flush()
    out = {**json.loads(worker.stdout.readline()), "load average": loadavg}
    if hog is not None:
        (n0, t0), (n1, t1) = before, _count(hog)
        out["other job"] = (n1 - n0) / (t1 - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="per workload and run")
    ap.add_argument("--rounds", type=int, default=3, help="runs per setting and load (median)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.seconds)
        return
    started = time.perf_counter()
    workers = {name: _start([__file__, "--worker", "--seconds", str(args.seconds)], _env(case))
               for name, case in CASES.items()}
    runs: dict[tuple[str, str], list[dict]] = {}
    try:
        for load in LOADS:
            hog = None if load == "alone" else _start(
                ["-c", HOG.format(operands=OTHER[load.split()[-1]])], _env({}))
            try:
                for _ in range(args.rounds):
                    for name, proc in workers.items():
                        r = run_case(proc, hog)
                        runs.setdefault((name, load), []).append(r)
                        print(f"{name:9} {load:12} " + "  ".join(f"{w} {r[w]:7.1f}/s"
                                                                for w in WORKLOADS)
                              + f"  threads {r['threads']}  load avg {r['load average']:.2f}"
                              + (f"  other job {r['other job']:.1f}/s" if hog else ""),
                              flush=True)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    finally:
        for proc in workers.values():
            proc.stdin.close()
            proc.wait()
    print(f"\n{time.perf_counter() - started:.0f} s in all; medians of {args.rounds} run(s), "
          f"{args.seconds} s per workload and run\n")
    cols = [(n, ld) for n in CASES for ld in LOADS]
    cell = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in runs.items()}
    print("| iterations/s | " + " | ".join(f"{n}, {ld}" for n, ld in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for w in WORKLOADS:
        print(f"| {w} | " + " | ".join(f"{cell[c][w]:.1f}" for c in cols) + " |")
    for w in WORKLOADS:
        print(f"| {w}, per CPU-second | " + " | ".join(f"{cell[c][f'{w} per CPU-s']:.1f}"
                                                       for c in cols) + " |")
    print("| the other job's own matmuls/s | " + " | ".join(
        f"{cell[c]['other job']:.1f}" if "other job" in cell[c] else "-" for c in cols) + " |")
    print("| load average before | " + " | ".join(f"{cell[c]['load average']:.2f}"
                                                for c in cols) + " |")


if __name__ == "__main__":
    main()
