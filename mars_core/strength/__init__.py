"""Strength: how strong a policy is in games against fixed opponents, and which variant of a
training recipe is stronger.

- `suite`: the game evaluation (the evaluate and strength stages, `mars eval games`):
  a policy against fixed opponents, every game x opponent x seat, as normalized returns;
- `ablation`: an ablation across seeds, aggregated (`mars compare`).

The intervals both use are `mars_core/stats/`; the reasoning benchmarks are `reasoning/`.

May import: games, rollout, stats, types, vocab.
"""
