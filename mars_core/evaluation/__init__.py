"""Evaluation: how strong a policy is, and whether a difference is real.

- `game_eval`: the game evaluation (the evaluate and strength stages, `mars eval games`):
  a policy against fixed opponents, every game x opponent x seat, as normalized returns;
- `intervals`: small-sample 95% intervals (game evaluation cells, paired differences, benchmark
  accuracies);
- `ablation`: an ablation across seeds, aggregated (`mars compare`).

May import: games, rollout, types, vocab.
"""
