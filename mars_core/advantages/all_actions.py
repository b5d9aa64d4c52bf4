"""Every observed action of a state in every visit: the counterfactual rows (issue 45).

An on-policy update pushes a state toward its better action by p(1 - p) x (the value gap) per
visit: once the policy leans 96% one way the push has faded 25x (docs/lab.md, the signal
table), and in Kuhn Poker "J facing a bet" drifts with the states that share its weights
instead of learning to fold. Where a state recurs in the batch, the value of each of its actions
is measured there (the mean advantage of the turns that took it), so each visit can train
*every* action seen in that state, not only the one it sampled: the all-action policy gradient,
sum over a of A(s, a) grad log pi(a | s). With a per-state baseline, A(s, a) = Q(s, a) - V(s),
the push on a two-action state is (p^2 + (1 - p)^2) x gap per visit: at least half the gap,
whatever p.

A state is what the policy sees: the same game, role and prompt tokens (the completion of one
turn is a valid reply to the other's prompt only then). An action is a valid turn's extracted
`action`; the row trained for it is the completion most often sampled for it in that state
(ties: the first in row order), with that turn's behaviour log-probs and temperature, so the
trainer's importance weights stay exact. Invalid replies are never added (they keep their own
turns), and a state where one action was seen adds nothing.

Pure, like the estimators: polars in, polars out; the trainer never knows a row was added.
"""
from __future__ import annotations

import polars as pl

from mars_core.types import COUNTERFACTUAL  # the column marking an added row (False on the batch's own)
STATE_KEYS = ("game", "role")  # with the prompt tokens: one state as the policy sees it
_STATE, _ROW, _COMP = "__cf_state", "__cf_row", "__cf_completion"
# what an added row takes from the turn that sampled its completion
TAKEN = ("completion_ids", "logprobs", "temperature", "reply", "action")


def _token_key(col: str) -> pl.Expr:
    """A list of token ids as one comparable string."""
    return pl.col(col).list.eval(pl.element().cast(pl.Utf8)).list.join(",")


def with_all_actions(df: pl.DataFrame) -> pl.DataFrame:
    """`df` (turns with an `advantage` column) with a `counterfactual` column (False) and, after
    its rows, one added row (True) for every turn and every other valid action seen in the
    turn's state: the turn's identity and prompt, that action's most sampled completion there
    and the mean advantage of the turns that took it there."""
    for col in ("advantage", "prompt_ids", "completion_ids", "action", "valid", *STATE_KEYS):
        if col not in df.columns:
            raise ValueError(f"all_actions needs the column '{col}' in the batch")
    own = df.with_columns(pl.lit(False).alias(COUNTERFACTUAL))
    if df.is_empty():
        return own
    keyed = own.with_row_index(_ROW).with_columns(
        pl.concat_str([*STATE_KEYS, _token_key("prompt_ids")], separator="|").alias(_STATE),
        _token_key("completion_ids").alias(_COMP))
    taken = keyed.filter(pl.col("valid") & (pl.col("action") != "")
                         & (pl.col("completion_ids").list.len() > 0))
    value = taken.group_by(_STATE, "action").agg(pl.col("advantage").mean().alias("__cf_adv"))
    counts = taken.group_by(_STATE, "action", _COMP).agg(
        pl.len().alias("__cf_n"), pl.col(_ROW).min().alias("__cf_first"))
    pick = (counts.sort(["__cf_n", "__cf_first"], descending=[True, False])
            .unique([_STATE, "action"], keep="first", maintain_order=True)
            .join(keyed.select(_ROW, *TAKEN).rename({_ROW: "__cf_first"}), on="__cf_first")
            .join(value, on=[_STATE, "action"])
            .select(_STATE, "__cf_adv", *(pl.col(c).alias(f"__cf_{c}") for c in TAKEN)))
    added = (keyed.join(pick, on=_STATE, how="inner")
             .filter(pl.col("__cf_action") != pl.col("action"))
             .sort(_ROW, "__cf_action")
             .with_columns(pl.col("__cf_adv").alias("advantage"),
                           *(pl.col(f"__cf_{c}").alias(c) for c in TAKEN),
                           pl.lit(True).alias(COUNTERFACTUAL)))
    return pl.concat([own, added.select(own.columns)], how="vertical")


def with_all_actions_reference(df: pl.DataFrame) -> pl.DataFrame:
    """The plain-loop twin of `with_all_actions` (the tests hold it to this)."""
    rows = df.to_dicts()
    state = [(r["game"], r["role"], tuple(r["prompt_ids"])) for r in rows]
    sums: dict[tuple, list[float]] = {}
    best: dict[tuple, tuple[int, int]] = {}  # (state, action) -> (-count, first row) of a pick
    seen: dict[tuple, dict[tuple, list[int]]] = {}  # (state, action) -> completion -> rows
    for i, r in enumerate(rows):
        if not (r["valid"] and r["action"] and r["completion_ids"]):
            continue
        key = (state[i], r["action"])
        sums.setdefault(key, []).append(r["advantage"])
        seen.setdefault(key, {}).setdefault(tuple(r["completion_ids"]), []).append(i)
    for key, comps in seen.items():
        best[key] = min((-len(ix), ix[0]) for ix in comps.values())
    out = [{**r, COUNTERFACTUAL: False} for r in rows]
    for i, r in enumerate(rows):
        for (s, action) in sorted(k for k in sums if k[0] == state[i]):
            if action == r["action"]:
                continue
            src = rows[best[(s, action)][1]]
            out.append({**r, **{c: src[c] for c in TAKEN}, COUNTERFACTUAL: True,
                        "advantage": sum(sums[(s, action)]) / len(sums[(s, action)])})
    return pl.DataFrame(out, schema={**df.schema, COUNTERFACTUAL: pl.Boolean})
