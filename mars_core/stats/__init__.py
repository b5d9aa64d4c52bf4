"""Statistics: whether a difference is real.

- `intervals`: small-sample 95% intervals (game strength cells, paired differences, benchmark
  accuracies).

May import: nothing of ours (a leaf).
"""
