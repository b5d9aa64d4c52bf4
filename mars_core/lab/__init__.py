"""The learning lab: short experiments that say why a policy learns or does not (docs/lab.md).

- `kuhn`: Kuhn Poker exactly (its 12 information states, the prompts a seat sees in each,
  exact action values of any pair of policies, the best response to `bot:random`);
- `tictactoe`: Tic-Tac-Toe exactly (every move's value under perfect play; a position read
  back from an observation in either layout: the learning report's minimax-optimal moves);
- `probe`: the capacity probe (a parametrization and prompt layout fitted to the best
  response by supervision; `bench/lab.py`, `make lab`);
- `coverage`: how many Tic-Tac-Toe positions a policy that learns them one by one must be
  taught to reach a score (a table policy, scored exactly or by sampled games;
  `bench/coverage.py`, `make lab-coverage`);
- `selfplay`: self-play updates on a table policy, values from sampled batches or exact,
  exploitability exact: the ceiling of an update (`bench/selfplay_tabular.py`).

May import: advantages, games, models, rollout, strength.
"""
