"""The engine/trainer log-prob gap that decoupled PPO corrects, measured. Prints figures;
asserts nothing.

    python bench/behaviour_gap.py [--model embedded] [--games 8] [--game kuhn_poker]

Plays the same games with the in-process engine in fp32 and under bf16 autocast, untruncated
and with the presets' top-k 100 / top-p 0.99, then recomputes every sampled token's log-prob
the way the update does at its start (fp32, untruncated: the proximal policy pi_old) and
prints, per setting, the mean and largest |log pi_old - log pi_behaviour| per token and the
importance weight min(pi_old / pi_behaviour, 2) the update would give (mean, share capped).
A second part shows whether a completion depends on the prompts that share its call: the same
games played with all pending turns in one engine call and one prompt per call.
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first: the thread settings, before torch loads)

import argparse
import time

from mars_core.run import offline  # noqa: E402

offline.apply()

import torch  # noqa: E402

from mars_core.engines.hf import HFEngine  # noqa: E402
from mars_core.models.weights import resolve_model  # noqa: E402
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes  # noqa: E402
from mars_core.training.trainer import Forward, Sample, sequence_logprobs  # noqa: E402
from mars_core.types import SamplingParams  # noqa: E402


def gap(engine: HFEngine, game: str, n: int, params: SamplingParams) -> dict[str, float]:
    specs = [EpisodeSpec(f"g{i}", game, 100 + i, ("policy", "policy")) for i in range(n)]
    episodes = play_episodes(specs, engine, PromptBuilder(engine.tokenizer, "answer",
                                                          keep_history=False), params,
                             progress=False)
    turns = [t for ep in episodes for t in ep.turns if t.completion_ids]
    samples = [Sample(t.prompt_ids, t.completion_ids, 0.0, t.game, t.temperature) for t in turns]
    diffs = []
    with torch.no_grad():
        for i in range(0, len(samples), 8):
            logp, mask = sequence_logprobs(engine.model, samples[i:i + 8],
                                           Forward(engine.tokenizer.pad_token_id))
            for row, t in enumerate(turns[i:i + 8]):
                diffs.append(logp[row][mask[row].bool()] - torch.tensor(t.logprobs))
    d = torch.cat(diffs)
    w = d.exp().clamp(max=2.0)
    return {"tokens": float(len(d)), "mean_abs": float(d.abs().mean()),
            "max_abs": float(d.abs().max()), "mean": float(d.mean()),
            "weight_mean": float(w.mean()), "capped": float((d.exp() > 2.0).float().mean())}


def batch_dependence(path: str, bf16: bool, game: str, n: int) -> tuple[int, int]:
    """The same games played with every pending turn in one engine call and with one prompt
    per call (per-turn seeds: the draws do not depend on the call): completions that differ."""
    params = SamplingParams(temperature=0.6, top_p=1.0, top_k=0, max_new_tokens=12,
                            stop=("</answer>",), seed=1)
    specs = [EpisodeSpec(f"b{i}", game, 200 + i, ("policy", "policy")) for i in range(n)]
    played = []
    for batch in (32, 1):
        engine = HFEngine.from_path(path, autocast_bf16=bf16, batch_size=batch,
                                     fp32_weights=True)
        eps = play_episodes(specs, engine, PromptBuilder(engine.tokenizer, "answer",
                                                         keep_history=False), params,
                            progress=False)
        played.append([t.completion_ids for ep in eps for t in ep.turns if t.completion_ids])
    together, alone = played
    return sum(a != b for a, b in zip(together, alone)), min(len(together), len(alone))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="embedded")
    p.add_argument("--game", default="kuhn_poker")
    p.add_argument("--games", type=int, default=8)
    args = p.parse_args()
    from mars_core.models.precision import cpu_description  # every figure names its CPU
    print(f"machine: {cpu_description()}", flush=True)
    path = str(resolve_model(args.model))
    print(f"{args.model}; {args.games} "
          f"{args.game} self-play games per row; pi_old: fp32, untruncated, at T = 0.6")
    print(f"{'engine':28s} {'tokens':>6s} {'mean|gap|':>9s} {'max|gap|':>9s} {'mean gap':>9s} "
          f"{'mean w':>7s} {'capped':>7s} {'s':>6s}")
    for bf16 in (False, True):
        engine = HFEngine.from_path(path, autocast_bf16=bf16, fp32_weights=True)
        for top_k, top_p in ((0, 1.0), (100, 0.99)):
            params = SamplingParams(temperature=0.6, top_p=top_p, top_k=top_k, max_new_tokens=12,
                                    stop=("</answer>",), seed=1)
            start = time.perf_counter()
            r = gap(engine, args.game, args.games, params)
            label = f"{'bf16' if bf16 else 'fp32'} top_k {top_k} top_p {top_p}"
            print(f"{label:28s} {r['tokens']:6.0f} {r['mean_abs']:9.4f} {r['max_abs']:9.4f} "
                  f"{r['mean']:9.4f} {r['weight_mean']:7.4f} {r['capped']:7.2%} "
                  f"{time.perf_counter() - start:6.1f}")
    for bf16 in (False, True):
        differ, n = batch_dependence(path, bf16, args.game, args.games)
        print(f"{'bf16' if bf16 else 'fp32'}: {differ} of {n} completions differ between one "
              "call for all pending turns and one call per prompt")


if __name__ == "__main__":
    main()
