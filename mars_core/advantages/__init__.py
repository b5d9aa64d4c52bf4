"""Advantages: the compute_advantages stage's arithmetic (SPEC section 3).

- `estimators`: the estimators by name, as records (`ESTIMATORS`: what each needs, whether it
  keeps state across iterations), all called as `estimate(batch, options, state)`;
- `vectorised`: the estimators as pure polars functions over a batch of turns;
- `reference`: their plain-loop twins, the ground truth the unit tests hold them to.

May import: types, vocab.
"""
