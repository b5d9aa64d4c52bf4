"""Where the in-process engine's decode step goes on a GPU: the check (bench/gpu_check.py,
step 4) measured 14 tokens/s at batch 1 and 372 at batch 64 on an H200 for the Qwen3-0.6B
shape, about 70 ms a step plus 1.6 ms a row. This splits one decode step into its parts, on the
same model (random weights, fp32 under bf16 autocast, as the engine runs it):

- `forward`: the model's cached one-token forward alone (no sampling), synchronized;
- `forward_bf16`: the same with bf16 weights and no autocast (what autocast's casts cost);
- `to_cpu`: the last-position logits copied to the CPU, as the engine does every step;
- `sample_cpu`: the engine's per-row sampler (`sample_token`: temperature, top-k 100, top-p)
  on the CPU, per row;
- `sample_gpu`: every row at once on the device (`sample_rows`, the engine's sampler there);
- `engine_rowwise`: `HFEngine.generate` end to end, per step, its rows sampled one at a time
  on the CPU (`sample_on_device` off: the engine before `sample_rows`);
- `engine`: the same with every row of a step sampled at once on the device (`sample_rows`,
  the default on a GPU);
- a torch.profiler table of engine steps at batch 1 (top ops by self CPU time).

    python bench/gpu_gen_profile.py --carry .gpu-carry --out $OUT [--tiny]

Prints a table; writes gen_profile.json and gen_profile.txt to --out. Asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (str(REPO), str(REPO / "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)

from gpu_check_carry import DEFAULT_CARRY, setup_packages  # noqa: E402
from gpu_check_update import QWEN3_06B, build, qwen3  # noqa: E402


def timed(fn, sync, repeat: int) -> float:
    """Median seconds of `fn` over `repeat` calls after one warm-up."""
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--carry", type=Path, default=DEFAULT_CARRY)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "runs/gen-profile"))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    site = Path(tempfile.mkdtemp(prefix="mars-gen-profile-site-"))
    setup_packages(args.carry, site)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from gpu_check_steps import _Tok
    from mars_core.engines.hf import HFEngine, sample_rows, sample_token
    from mars_core.types import SamplingParams

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    config = qwen3(QWEN3_06B, args.tiny)
    prompt_len, new = (16, 8) if args.tiny else (args.prompt, args.tokens)
    batches = [1, 4] if args.tiny else args.batches
    params = SamplingParams(temperature=0.6, top_p=0.99, top_k=100, max_new_tokens=new, seed=1)
    rows, text = [], []
    for dtype_label, dtype, autocast in (("fp32 + bf16 autocast", torch.float32, True),
                                         ("bf16 weights", torch.bfloat16, False)):
        model = build(config, device, dtype)
        model.generation_config.eos_token_id = None
        for batch in batches:
            rng = random.Random(batch)
            ids = torch.tensor([[rng.randrange(1, config.vocab_size) for _ in range(prompt_len)]
                                for _ in range(batch)], device=device)
            ctx = (torch.autocast(device, dtype=torch.bfloat16) if autocast
                   else torch.autocast(device, enabled=False))
            row = {"weights": dtype_label, "batch": batch}
            with torch.inference_mode(), ctx:
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
                cache = out.past_key_values
                one = ids[:, -1:]
                pos = torch.full((batch, 1), prompt_len, device=device)

                def fwd():
                    # the same position each time; the cache grows by one per call, as in
                    # decode (no padding, so no mask: the causal mask follows the cache)
                    return model(input_ids=one, position_ids=pos,
                                 past_key_values=cache, use_cache=True, logits_to_keep=1)

                row["forward_ms"] = 1e3 * timed(fwd, sync, 10)
                logits = fwd().logits[:, -1, :].float()
                row["to_cpu_ms"] = 1e3 * timed(lambda: logits.cpu(), sync, 10)
                host = logits.cpu()
                gen = torch.Generator().manual_seed(0)
                row["sample_cpu_ms_per_row"] = 1e3 * timed(
                    lambda: sample_token(host[0], params, gen), lambda: None, 20)

                gens = [torch.Generator().manual_seed(r) for r in range(batch)]

                def batched():
                    return sample_rows(logits, params, gens)

                row["sample_gpu_ms"] = 1e3 * timed(batched, sync, 10)
            del cache, out
            engine = HFEngine(model, _Tok(), batch_size=batch, autocast_bf16=autocast)
            engine.eos_ids = frozenset()
            prompts = ids.tolist()
            # the engine end to end, its rows sampled one at a time on the CPU (as before
            # sample_rows) and all at once on the device (the default on a GPU)
            for label, on_device in (("engine_rowwise", False), ("engine", True)):
                engine.sample_on_device = on_device
                engine.generate(prompts[:1], SamplingParams(max_new_tokens=2))
                engine.stats.update(generated_tokens=0, seconds=0.0)
                engine.generate(prompts, params)
                row[f"{label}_ms_per_step"] = 1e3 * engine.stats["seconds"] / new
                row[f"{label}_tokens_per_s"] = engine.tokens_per_second()
            rows.append(row)
            print(json.dumps(row), flush=True)
            if batch == batches[0] and autocast:
                from torch.profiler import ProfilerActivity, profile

                acts = [ProfilerActivity.CPU]
                if device == "cuda":
                    acts.append(ProfilerActivity.CUDA)
                with profile(activities=acts) as prof:
                    engine.generate(prompts, SamplingParams(temperature=0.6, top_p=0.99,
                                                            top_k=100, max_new_tokens=8, seed=2))
                table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
                text.append(f"profile, batch {batch}, {dtype_label}, 8 new tokens:\n{table}")
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    report = {"device": device, "rows": rows}
    (args.out / "gen_profile.json").write_text(json.dumps(report, indent=1))
    (args.out / "gen_profile.txt").write_text("\n\n".join(text))
    print("\n".join(text)[-6000:])
    cols = ["weights", "batch", "forward_ms", "to_cpu_ms", "sample_cpu_ms_per_row",
            "sample_gpu_ms", "engine_rowwise_ms_per_step", "engine_ms_per_step",
            "engine_rowwise_tokens_per_s", "engine_tokens_per_s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c])
                                for c in cols) + " |")
    shutil.rmtree(site, True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
