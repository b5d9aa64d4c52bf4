"""Batching: the bank_episodes and build_batch stages (SPEC section 5, item 5).

- `bank`: what of an iteration can be trained on, stored as one Parquet part per iteration and
  read back for a window of iterations;
- `builder`: the stratified batch builder over the bank.

May import: run, types, vocab.
"""
