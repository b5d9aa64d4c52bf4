"""The learning lab: short experiments that say why a policy learns or does not (docs/lab.md).

- `kuhn`: Kuhn Poker exactly (its 12 information states, the prompts a seat sees in each,
  exact action values of any pair of policies, the best response to `bot:random`);
- `tictactoe`: Tic-Tac-Toe exactly (every move's value under perfect play; a position read
  back from an observation in either layout: the learning report's minimax-optimal moves);
- `probe`: the capacity probe (a parametrization and prompt layout fitted to the best
  response by supervision; `bench/lab.py`, `make lab`).

May import: games, models, rollout.
"""
