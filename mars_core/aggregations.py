"""The loss aggregation modes, defined once (SPEC section 4): how the token losses of a batch
become one number. Read by the config (`algorithm.loss_aggregation`) and by
`mars_core.losses.aggregate`, which both trainers (torch, DeepSpeed) call. A leaf: no imports.

- seq_mean_token_mean: each sequence weighs the same (MARS);
- token_mean: each token weighs the same;
- seq_mean_token_sum: sequence sums, averaged over sequences.
"""
from __future__ import annotations

from typing import Literal, get_args

Aggregation = Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)
