"""Engines side by side on the same prompts, against this CPU's roofline. Prints figures;
asserts nothing.

    python bench/engine_bench.py [--games kuhn_poker,tic_tac_toe] [--n 32]
                                 [--engines hf-fp32,hf-bf16,hf-int8,vllm] [--model embedded]

1. For each game, `--n` games are played at its learning recipe's settings (Kuhn Poker against
   `bot:random` on both seats, Tic-Tac-Toe in self-play; the recipe's sampling, token limit and
   engine batch size) with the in-process engine in fp32, and every engine call is recorded:
   its prompts, its sampling parameters.
2. Each engine then answers exactly those calls, in the same order and batches: prompt and
   generated tokens/s, the games/s that makes (engine time only: the games' own logic left
   out), and the fraction of this CPU's measured matmul peak the engine reached.
3. Where a game's tokens go: per policy turn, the prompt's tokens, and those the in-process
   engine computes: the shared prefixes (a seat's rules) once for every call (its prefix cache;
   `--per-call` adds each in-process engine without it, `<engine>/call`, the prefixes computed
   again in every call), then each prompt's own tokens (board, legal actions, instructions),
   then the generated ones.

FLOPs per token are counted as 2 x the non-embedding parameters (the matmuls), plus the
attention's 4 x layers x width x context, plus the output head (2 x vocabulary x width) for the
generated tokens only, over the tokens the in-process engine computes (as `HFEngine` batches,
shares and caches prefixes, `prompt_tokens`) and every generated token. The peak is a model-shaped
matmul (tokens x width times width x MLP width, the best of a decode-sized and a prefill-sized
token count) timed here in fp32 and in bf16; each engine is set against the peak of the
precision it ran. `hf-int8` is the in-process engine on torch's dynamic int8 linear layers,
set against the fp32 peak (above 100%: int8 arithmetic is cheaper than fp32's). `vllm` is the
vLLM CPU server (`make vllm-env`; bf16, one worker thread: vLLM's CPU build keeps a core for its
scheduler), skipped with the reason when it cannot start; it caches prefixes across calls
too (in blocks of 16 tokens), counted as the in-process engine's.
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

from mars_core.run import offline

offline.apply()

import torch  # noqa: E402

from mars_core.config import load_config  # noqa: E402
from mars_core.models.precision import cpu_description  # noqa: E402
from mars_core.models.prefix import PrefixCache, plan_prefixes  # noqa: E402
from mars_core.models.weights import resolve_model  # noqa: E402
from mars_core.rollout.play import EpisodeSpec, play_episodes  # noqa: E402
from tasks.engine_factory import prompt_builder, sampling  # noqa: E402

RECIPES = {"kuhn_poker": "configs/learning/kuhn_vs_random.yaml",
           "tic_tac_toe": "configs/learning/tic_tac_toe.yaml"}
ENGINES = ("hf-fp32", "hf-bf16", "hf-int8", "vllm")


@dataclass
class Recorder:
    """An engine that records every call it answers (prompts and sampling parameters)."""

    engine: object
    calls: list = field(default_factory=list)

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def generate(self, prompts, params):
        self.calls.append(([list(p) for p in prompts], params))
        return self.engine.generate(prompts, params)


def specs_for(game: str, cfg, n: int) -> list[EpisodeSpec]:
    if game == "tic_tac_toe":
        return [EpisodeSpec(f"e{i}", game, 1000 + i, ("policy", "policy")) for i in range(n)]
    bot = cfg.rollout.opponents.get(game, "bot:random")
    return [EpisodeSpec(f"e{i}", game, 1000 + i,
                        ("policy", bot) if i % 2 == 0 else (bot, "policy")) for i in range(n)]


def prompt_tokens(prompts: list[list[int]], batch_size: int,
                  seen: set | None = None) -> tuple[int, int]:
    """(prompt tokens the in-process engine computes for one call, of which in prefix passes):
    as `HFEngine.generate` does, the prompts sorted, cut into batches of `batch_size`, and in
    each batch every shared prefix `plan_prefixes` finds run once (a call mixing the two seats
    of Kuhn Poker has one rules prefix per seat); a prefix already in `seen` (the engine's
    prefix cache, kept across calls) costs nothing, and the new ones join it."""
    order = sorted(prompts, key=tuple)
    computed = in_prefixes = 0
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        lengths = plan_prefixes(batch)
        prefixes = {tuple(q[:k]) for q, k in zip(batch, lengths) if k}
        if seen is not None:
            prefixes -= seen
            seen |= prefixes
        computed += sum(len(q) - k for q, k in zip(batch, lengths)) + sum(map(len, prefixes))
        in_prefixes += sum(map(len, prefixes))
    return computed, in_prefixes


def model_shape(model) -> dict:
    c = model.config
    emb = c.vocab_size * c.hidden_size
    total = sum(p.numel() for p in model.parameters())
    return {"params": total - emb, "layers": c.num_hidden_layers, "width": c.hidden_size,
            "mlp": getattr(c, "intermediate_size", 4 * c.hidden_size), "vocab": c.vocab_size}


def flops(calls, outputs, shape, batch_size: int, cached: bool = True) -> float:
    """The FLOPs of answering `calls` with `outputs` (generated token counts per prompt), the
    prompts computed as the in-process engine does (`prompt_tokens`; `cached`: with its prefix
    cache across calls)."""
    p, lay, w, v = shape["params"], shape["layers"], shape["width"], shape["vocab"]
    total, seen = 0.0, (set() if cached else None)
    for (prompts, _), gens in zip(calls, outputs):
        computed, _ = prompt_tokens(prompts, batch_size, seen)
        ctx_sum = sum(len(q) * (len(q) + 1) / 2 for q in prompts)  # attention over the prompt
        total += 2 * p * computed + 4 * lay * w * ctx_sum
        for q, g in zip(prompts, gens):
            total += g * (2 * p + 2 * v * w) + 4 * lay * w * (g * len(q) + g * (g + 1) / 2)
    return total


PEAK_ROWS = (256, 2048)  # a decode-sized and a prefill-sized batch of tokens


def matmul_peak(shape, bf16: bool, seconds: float = 1.0) -> float:
    """FLOP/s of a model-shaped matmul (tokens x width @ width x MLP width) on this CPU: the
    best of PEAK_ROWS token counts."""
    dtype = torch.bfloat16 if bf16 else torch.float32
    best = 0.0
    for rows in PEAK_ROWS:
        a = torch.randn(rows, shape["width"], dtype=dtype)
        b = torch.randn(shape["width"], shape["mlp"], dtype=dtype)
        for _ in range(5):
            a @ b
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            n += 1
        best = max(best, n * 2 * rows * shape["width"] * shape["mlp"] / (time.perf_counter() - start))
    return best


def build(name: str, cfg, path: str):
    """The engine `name`, or a string saying why it could not be built."""
    from mars_core.engines.hf import HFEngine

    kwargs = {"batch_size": cfg.rollout.engine_batch_size, "share_prefix": cfg.model.share_prefix}
    if name in ("hf-fp32", "hf-bf16"):
        return HFEngine.from_path(path, autocast_bf16=name == "hf-bf16", **kwargs)
    if name == "hf-int8":  # the engine of `rollout.int8`
        return HFEngine.from_path(path, int8=True, **kwargs)
    python = Path(cfg.engine.vllm.launch.python)
    if not python.exists():
        return f"no vLLM environment at {python} (make vllm-env)"
    from tasks.vllm_launch import vllm_engine

    return vllm_engine(cfg, path, Path("runs") / "engine_bench")


def replay(engine, calls) -> tuple[float, list[list[int]]]:
    outputs, start = [], time.perf_counter()
    for prompts, params in calls:
        outputs.append([len(c.token_ids) for c in engine.generate(prompts, params)])
    return time.perf_counter() - start, outputs


def bench_game(game: str, n: int, engines: list[str], model: str, peaks: dict,
               per_call_too: bool = False) -> None:
    cfg = load_config(RECIPES[game])
    path = str(resolve_model(model))
    reference = build("hf-fp32", cfg, path)
    shape = model_shape(reference.model)
    recorder = Recorder(reference)
    episodes = play_episodes(specs_for(game, cfg, n), recorder, prompt_builder(cfg, reference.tokenizer),
                             sampling(cfg, 1234), progress=False,
                             per_game=cfg.rollout.per_game_sampling(1234))
    calls = recorder.calls
    prompts = [q for ps, _ in calls for q in ps]
    batch = cfg.rollout.engine_batch_size
    per_call = [prompt_tokens(ps, batch) for ps, _ in calls]
    seen: set = set()
    cached = [prompt_tokens(ps, batch, seen) for ps, _ in calls]
    turns = len(prompts)
    print(f"\n{game}: {n} games ({RECIPES[game]}), {turns} policy turns in {len(calls)} engine "
          f"calls, {sum(len(e.turns) for e in episodes) / n:.1f} turns a game")
    ended = sum(e.error_player >= 0 for e in episodes)
    if ended:
        print(f"  {ended} of {n} games ended by an invalid reply" + (
            ": the policy answers out of format (as the embedded model does before its warm-up), "
            "so these are not the recipe's games; pass --model a warmed-up policy (the model "
            "folder of a run's format warm-up)" if ended > n / 2 else ""))
    in_prompts = sum(len(q) for q in prompts)
    for label, counts in (("prefixes cached across calls", cached),
                          ("prefixes once per call's batch", per_call)):
        total, shared = sum(c for c, _ in counts), sum(x for _, x in counts)
        print(f"  tokens per policy turn: prompt {in_prompts / turns:.0f}; computed, {label}: "
              f"{total / turns:.1f} (shared prefixes {shared / turns:.1f}, each prompt's own "
              f"tokens {(total - shared) / turns:.1f})")
    print(f"  {'engine':12s} {'wall s':>7s} {'games/s':>8s} {'prompt tok/s':>13s} "
          f"{'gen tok/s':>10s} {'gen/turn':>9s} {'GFLOP/game':>11s} {'GFLOP/s':>8s} {'of peak':>8s}")
    for name in engines:
        engine = reference if name == "hf-fp32" else build(name, cfg, path)
        if isinstance(engine, str):
            print(f"  {name:12s} skipped: {engine}")
            continue
        runs = [(name, True)] + ([(f"{name}/call", False)] if per_call_too and name != "vllm"
                                 else [])
        for label, cache in runs:
            if name != "vllm":  # a cold cache (the reference's is warm from recording), or none
                engine.prefix_cache = PrefixCache() if cache else None
            wall, outputs = replay(engine, calls)
            gen = sum(sum(o) for o in outputs)
            f = flops(calls, outputs, shape, batch, cached=cache)
            peak = peaks["bf16" if name in ("hf-bf16",) else "fp32"]
            print(f"  {label:12s} {wall:7.1f} {n / wall:8.2f} {in_prompts / wall:13.0f} "
                  f"{gen / wall:10.1f} {gen / turns:9.1f} {f / n / 1e9:11.1f} "
                  f"{f / wall / 1e9:8.1f} {f / wall / peak:8.0%}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", default="kuhn_poker,tic_tac_toe")
    p.add_argument("--n", type=int, default=32, help="games per game (default 32)")
    p.add_argument("--engines", default="hf-fp32,hf-bf16,hf-int8,vllm")
    p.add_argument("--model", default="embedded")
    p.add_argument("--per-call", action="store_true",
                   help="also each in-process engine without its prefix cache (`<engine>/call`: "
                        "each call's shared prefixes computed again)")
    args = p.parse_args()
    games = [g for g in args.games.split(",") if g]
    engines = [e for e in args.engines.split(",") if e]
    for bad in [g for g in games if g not in RECIPES] + [e for e in engines if e not in ENGINES]:
        p.error(f"unknown game or engine {bad!r} (games: {', '.join(RECIPES)}; "
                f"engines: {', '.join(ENGINES)})")
    print(f"machine: {cpu_description()}", flush=True)
    from mars_core.models.weights import load_model

    shape = model_shape(load_model(str(resolve_model(args.model))))
    peaks = {"fp32": matmul_peak(shape, False), "bf16": matmul_peak(shape, True)}
    print(f"matmul peak (best of {' and '.join(map(str, PEAK_ROWS))} tokens x {shape['width']} @ "
          f"{shape['width']} x {shape['mlp']}): "
          f"fp32 {peaks['fp32'] / 1e9:.0f} GFLOP/s, bf16 {peaks['bf16'] / 1e9:.0f} GFLOP/s "
          "(int8 and vLLM are set against fp32)")
    try:
        for game in games:
            bench_game(game, args.n, engines, args.model, peaks, args.per_call)
    finally:
        if "vllm" in engines:
            from tasks.vllm_launch import shutdown_engines

            shutdown_engines()


if __name__ == "__main__":
    main()
