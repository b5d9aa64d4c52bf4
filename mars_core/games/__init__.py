"""Games: the rules of every game the project plays, and its opponents.

- `catalog`: the games by name (a leaf: config checks read it); `registry`: the adapters,
  built on first use; `base`: the adapter interface and the answer format;
- one module per game family (`board_games`, `poker`, `hanabi`, `blotto`, `ipd`, `codenames`,
  `mafia`, `openspiel_games`, `textarena_games`), `nash` (equilibrium tables);
- `opponents`: who can sit at a seat (bots, frozen checkpoints), `bots`: the bots' moves.

May import: types, vocab.
"""
