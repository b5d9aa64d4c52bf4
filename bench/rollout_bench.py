"""Rollout throughput and where an iteration's time goes. Prints figures; asserts nothing.

    python bench/rollout_bench.py [--model PATH|embedded] [--games 16] [--run runs/demo]

1. The same self-play games (same seeds, same prompts) played twice: all games at once, every
   pending turn in one batched engine call, versus one game at a time. Prints tokens/s, wall
   time and engine calls of each.
2. With --run (or runs/demo when it exists): the share of an iteration's wall time spent in each
   stage, from the `time/<stage>` figures the stages recorded.
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import glob
import json
import time
from pathlib import Path

from mars_core.run import layout, offline  # noqa: E402

offline.apply()

from mars_core.config import load_config  # noqa: E402
from mars_core.models.weights import resolve_model  # noqa: E402
from mars_core.rollout.play import EpisodeSpec, RolloutStats, play_episodes  # noqa: E402
from tasks.engine_factory import make_engine, prompt_builder, sampling  # noqa: E402


def _play(engine, cfg, specs, batched: bool) -> tuple[float, RolloutStats, int, int]:
    stats = RolloutStats()
    prompt_tokens = engine.stats["prompt_tokens"]
    prompts = prompt_builder(cfg, engine.tokenizer)
    start = time.perf_counter()
    groups = [specs] if batched else [[s] for s in specs]
    turns = 0
    for group in groups:
        eps = play_episodes(group, engine, prompts, sampling(cfg, 1234), stats=stats, progress=False)
        turns += sum(len(e.turns) for e in eps)
    return time.perf_counter() - start, stats, turns, engine.stats["prompt_tokens"] - prompt_tokens


def bench_rollout(model: str, n_games: int, config: str) -> None:
    cfg = load_config(config)
    engine = make_engine(cfg, str(resolve_model(model)))
    specs = [EpisodeSpec(f"b{i}", "tic_tac_toe", 1000 + i, ("policy", "policy")) for i in range(n_games)]
    print(f"model {model}; {n_games} self-play Tic-Tac-Toe games; bf16 autocast "
          f"{engine.autocast_bf16}; max_new_tokens {cfg.rollout.max_new_tokens}")
    for batched in (True, False):
        wall, stats, turns, prompt_tokens = _play(engine, cfg, specs, batched)
        name = "batched (all games per call)" if batched else "one game at a time"
        print(f"  {name:30s} {stats.tokens_per_s:6.1f} generated tok/s  "
              f"{prompt_tokens / stats.generate_seconds:6.0f} prompt tok/s  {wall:6.1f} s wall  "
              f"{stats.engine_calls:4d} engine calls  {turns} turns  {stats.generated_tokens} tokens")


def bench_stages(run_dir: Path) -> None:
    totals: dict[str, float] = {}
    iters = sorted(glob.glob(str(run_dir / layout.ITER_GLOB)))
    for it in iters:
        for m in glob.glob(f"{it}/*/{layout.METRICS_FILE}"):
            for k, v in json.loads(Path(m).read_text()).items():
                if k.startswith("time/"):
                    totals[k[5:]] = totals.get(k[5:], 0.0) + v
    whole = sum(totals.values())
    if not whole:
        print(f"no finished iterations in {run_dir}")
        return
    print(f"stage shares over {len(iters)} iterations of {run_dir} ({whole / len(iters):.1f} s per iteration):")
    for stage, secs in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {stage:20s} {secs / len(iters):7.1f} s  {100 * secs / whole:5.1f} %")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model folder or 'embedded' (default: the demo "
                   "run's warmed-up model when it exists, else embedded)")
    p.add_argument("--games", type=int, default=16)
    p.add_argument("--config", default="configs/demo.yaml")
    p.add_argument("--run", default="runs/demo")
    args = p.parse_args()
    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    warmed = layout.start_model_dir(Path(args.run))
    model = args.model or (str(warmed) if warmed.is_dir() else "embedded")
    bench_rollout(model, args.games, args.config)
    if Path(args.run).is_dir():
        bench_stages(Path(args.run))


if __name__ == "__main__":
    main()
