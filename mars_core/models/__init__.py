"""Models: the weights a policy is made of, and how they run on this machine.

- `weights`: where model weights come from (the embedded SmolLM2, a local folder, a hub id);
- `manifest`: a model folder's manifest (sha256 and size of every file), checked before loading;
- `precision`: bf16 autocast chosen by measurement, per machine and phase;
- `prefix`: shared prompt prefixes, one forward pass for the rows of a batch that share one;
- `quiet`: third-party progress bars and notes kept out of the output unless MARS_VERBOSE.

May import: games, types, vocab.
"""
