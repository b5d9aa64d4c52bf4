"""Strength: how strong a policy is in games against fixed opponents, and which variant of a
training recipe is stronger.

- `suite`: the game evaluation (the evaluate and strength stages, `mars eval games`):
  a policy against fixed opponents, every game x opponent x seat, as normalized returns;
- `ablation`: an ablation across seeds, aggregated (`mars compare`);
- `exploitability`: Kuhn's and Leduc's exact exploitability of a language-model policy, read
  at every information state (sampled, with an interval, for a reasoning policy);
- `worst_case`: Tic-Tac-Toe's worst case, the exact best response to the policy;
- `curve`: a run's curve from its finished evaluations (read from its folder: `run`), the
  pictures and the sentence a finished run ends with.

The intervals both use are `mars_core/stats/`; the reasoning benchmarks are `eval/`.

May import: games, models, rollout, run, stats, types, vocab.
"""
