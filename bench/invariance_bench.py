"""Is a turn independent of its batch, and what does it cost? Prints figures; asserts nothing.

    python bench/invariance_bench.py [--games kuhn_poker,tic_tac_toe] [--n 32] [--model PATH]
                                     [--repeats 3]

1. For each game, `--n` games are played in self-play at its learning recipe's settings (its
   prompts, sampling, token limit and engine batch size) and every engine call is recorded.
2. Each mode answers exactly those calls twice: at the recipe's engine batch size and at a batch
   size of 5 (other rows beside each prompt, rows dropping out at other times). The completions
   that differ between the two layouts are counted (their tokens); a reproducible mode has 0.
3. The wall time of each mode at the recipe's batch size (median of `--repeats` replays, each
   after a cold prefix cache; the modes take turns, so a load that comes and goes falls on
   each), beside today's batched bf16.

Modes: `bf16` (today's in-process engine under bf16 autocast), `bf16-invariant` (the same with
`model.batch_invariant`: `mars_core.models.invariant`), `fp32`, `fp32-invariant`. `--model`: a
warmed-up policy folder (the embedded model answers Kuhn Poker out of format before its warm-up,
which ends games at the first turn).
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import statistics
import time

from engine_bench import Recorder  # bench/ is this script's sys.path[0]

from mars_core.run import offline

offline.apply()

from mars_core.config import load_config  # noqa: E402
from mars_core.engines.hf import HFEngine  # noqa: E402
from mars_core.models.precision import cpu_description  # noqa: E402
from mars_core.models.prefix import PrefixCache  # noqa: E402
from mars_core.models.weights import resolve_model  # noqa: E402
from mars_core.rollout.play import EpisodeSpec, play_episodes  # noqa: E402
from tasks.engine_factory import prompt_builder, sampling  # noqa: E402

RECIPES = {"kuhn_poker": "configs/learning/kuhn_selfplay.yaml",
           "tic_tac_toe": "configs/learning/tic_tac_toe.yaml"}
MODES = {"bf16": (True, False), "bf16-invariant": (True, True), "fp32": (False, False),
         "fp32-invariant": (False, True)}
OTHER_BATCH = 5


def answer(engine: HFEngine, calls, batch_size: int):
    """(seconds, every completion's tokens) of answering `calls` at `batch_size`, the prefix
    cache cold."""
    engine.batch_size, engine.prefix_cache = batch_size, PrefixCache()
    tokens, start = [], time.perf_counter()
    for prompts, params in calls:
        tokens.extend(c.token_ids for c in engine.generate(prompts, params))
    return time.perf_counter() - start, tokens


def bench_game(game: str, n: int, model: str, modes: list[str], repeats: int) -> None:
    cfg = load_config(RECIPES[game])
    path = str(resolve_model(model))
    batch = cfg.rollout.engine_batch_size
    recorder = Recorder(HFEngine.from_path(path, batch_size=batch))
    specs = [EpisodeSpec(f"e{i}", game, 1000 + i, ("policy", "policy")) for i in range(n)]
    play_episodes(specs, recorder, prompt_builder(cfg, recorder.tokenizer), sampling(cfg, 1234),
                  progress=False, per_game=cfg.rollout.per_game_sampling(1234))
    calls = recorder.calls
    turns = sum(len(p) for p, _ in calls)
    print(f"\n{game}: {n} self-play games ({RECIPES[game]}), {turns} policy turns in "
          f"{len(calls)} calls; engine batch {batch} vs {OTHER_BATCH}")
    engines = {}
    for mode in modes:
        bf16, invariant = MODES[mode]
        engines[mode] = HFEngine.from_path(path, batch_size=batch, autocast_bf16=bf16,
                                           share_prefix=cfg.model.share_prefix,
                                           batch_invariant=invariant)
    walls: dict[str, list[float]] = {mode: [] for mode in modes}
    tokens = {}
    for _ in range(repeats):
        for mode, engine in engines.items():
            wall, tokens[mode] = answer(engine, calls, batch)
            walls[mode].append(wall)
    print(f"  {'mode':15s} {'turns differing':>16s} {'wall s (median)':>16s} {'vs bf16':>8s}")
    base = statistics.median(walls["bf16"]) if "bf16" in walls else None
    for mode, engine in engines.items():
        _, other = answer(engine, calls, OTHER_BATCH)
        differ = sum(a != b for a, b in zip(tokens[mode], other))
        wall = statistics.median(walls[mode])
        ratio = f"{wall / base:.2f}x" if base else "-"
        print(f"  {mode:15s} {differ:>8d} of {turns:<5d} {wall:16.1f} {ratio:>8s}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", default="kuhn_poker,tic_tac_toe")
    p.add_argument("--n", type=int, default=32, help="games per game (default 32)")
    p.add_argument("--model", default="embedded")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    games = [g for g in args.games.split(",") if g]
    modes = [m for m in args.modes.split(",") if m]
    for bad in [g for g in games if g not in RECIPES] + [m for m in modes if m not in MODES]:
        p.error(f"unknown game or mode {bad!r} (games: {', '.join(RECIPES)}; "
                f"modes: {', '.join(MODES)})")
    print(f"machine: {cpu_description()}", flush=True)
    for game in games:
        bench_game(game, args.n, args.model, modes, args.repeats)


if __name__ == "__main__":
    main()
