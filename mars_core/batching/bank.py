"""The episodes bank (SPEC section 5, item 5): what of an iteration can be trained on
(`trainable_turns`), stored on disk as one parquet part per iteration (`bank_add`; the part's
name is the layout's, `mars_core.run.layout.bank_part`) and read back for a window of
iterations (`bank_read`), from which `mars_core.batching.builder` draws batches.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from mars_core.batching.builder import TRAJECTORY_KEYS
from mars_core.run.layout import BANK_PART_GLOB, bank_part
from mars_core.vocab import POLICY

_ROW = "__batch_row"  # helper column names as in mars_core.batching.builder


# --------------------------------------------------------------------------------------------
# bank on disk


def _check_iteration(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"iteration must be a non-negative int, got {k!r}")
    return k


def bank_add(root: Path, k: int, steps: pl.DataFrame) -> Path:
    """Write iteration k's eligible steps as the part `root/iter_XXXX.parquet` (its name is the
    layout's, `mars_core.run.layout.bank_part`).

    Adds (or replaces) an Int64 `iteration` column equal to k. The part is written to a
    temporary file in `root` and moved in place with `os.replace` (atomic on one file system),
    so a crash never leaves a half-written part; writing the same k again overwrites it
    (idempotent for resumed runs). Returns the part's path.
    """
    k = _check_iteration(k)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    out = steps.with_columns(pl.lit(k, dtype=pl.Int64).alias("iteration"))
    final = bank_part(root, k)
    tmp = root / f".{final.name}.{uuid.uuid4().hex}.tmp"
    try:
        out.write_parquet(tmp)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def bank_read(root: Path, iterations: Iterable[int]) -> pl.DataFrame:
    """The concatenated parts of `iterations` that exist (missing ones are skipped).

    Parts are read in increasing iteration order and concatenated with
    `how="diagonal_relaxed"` (columns missing from a part are null, dtypes are widened).
    When none of the requested parts exists, returns an empty frame with the schema of the
    newest part present in `root`, or `pl.DataFrame()` (no columns) when the bank is empty.
    """
    root = Path(root)
    wanted = sorted({_check_iteration(k) for k in iterations})
    paths = [p for p in (bank_part(root, k) for k in wanted) if p.is_file()]
    if paths:
        return pl.concat([pl.read_parquet(p) for p in paths], how="diagonal_relaxed")
    existing = sorted(root.glob(BANK_PART_GLOB)) if root.is_dir() else []
    if existing:
        return pl.DataFrame(schema=pl.read_parquet_schema(existing[-1]))
    return pl.DataFrame()


# --------------------------------------------------------------------------------------------
# what can be trained on

REWARD_PARTS = ("reward", "game_reward", "format_reward", "length_reward")


def trainable_turns(turns: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """The steps the update can learn from: the policy's eligible turns that have completion
    tokens, with the rewards of its eligible turns that have none carried onto them.

    A turn whose prompt left no room for a reply (a context overflow) has no completion
    tokens, so nothing of it can be trained on; yet its reward holds the invalid-reply penalty
    and the forfeit (SPEC sections 2 and 5). Dropped with it, running out of context would act
    like a neutral stop. So every reward part (`REWARD_PARTS` present in `turns`) of a tokenless
    step is added to the same seat's most recent earlier trainable step (its last trainable
    turn), which keeps each seat's return. A tokenless step with no earlier trainable step of
    its seat (it overflowed on its first turn) has nothing to put its reward on.

    Returns (steps, counts): steps in `turns`' order; counts `carried` (tokenless steps whose
    reward moved) and `lost` (tokenless steps with nowhere to go)."""
    keys = list(TRAJECTORY_KEYS)
    pool = turns.filter((pl.col("agent") == POLICY) & pl.col("eligible")).with_row_index(_ROW)
    has = pl.col("completion_ids").list.len() > 0
    parts = [c for c in REWARD_PARTS if c in pool.columns]
    target = "__batch_target"
    pool = pool.sort([*keys, "turn"]).with_columns(
        pl.when(has).then(pl.col("turn")).forward_fill().over(keys).alias(target))
    tokenless = pool.filter(~has)
    moved = tokenless.filter(pl.col(target).is_not_null())
    carry = moved.group_by([*keys, target]).agg(pl.col(parts).sum().name.suffix("__carry"))
    steps = pool.filter(has).join(carry, left_on=[*keys, "turn"], right_on=[*keys, target],
                                  how="left")
    steps = steps.with_columns(
        (pl.col(c) + pl.col(f"{c}__carry").fill_null(0.0)).alias(c) for c in parts)
    steps = steps.sort(_ROW).select(turns.columns)
    return steps, {"carried": moved.height, "lost": tokenless.height - moved.height}
