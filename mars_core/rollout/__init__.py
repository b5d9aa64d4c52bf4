"""Rollout: playing games with a policy (the generate_rollouts stage, and every other game).

- `play`: batched self-play, `play_episodes`, the project's only game loop (training rollouts,
  the game evaluation, the warm-up probe, the arena);
- `samplers`: which game, opponent and seat each episode of an iteration gets (In2AI);
- `validator`: the Action Validator, the one gate in front of every game step;
- `reports`: numbers and text made from episodes (rollout metrics, transcripts, curves).

May import: engines, games, types, vocab.
"""
