"""Which actions a visit of a state trains (`algorithm.train_actions`, issue 45).

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

`greedy` goes one step further, toward the capacity probe's supervision: each visit trains only
the action of highest measured value (the mean return-to-go of the turns that took it), with
advantage 1, a cross-entropy step whose push fades where the state is already right (target -
p), not where it is wrong. Once the policy stops sampling an action, its value is no longer
measured; with `memory` > 0 the values of a state's actions are remembered from batch to batch
(a running mean over the last `memory` measurements, saved with the checkpoint), so a state the
policy plays wrong keeps its label after the policy stopped exploring it; it holds at most
`algorithm.action_memory_states` states, the least recently measured forgotten first.

`best_valued` takes its labels from the Monte-Carlo values of each turn's own state
(`rollout.mc_rollouts`) instead of from other visits: every turn trains its state's move of
highest value, with advantage Q(s, best) - V(s) (the turn's `monte_carlo` advantage had it
played that move; a state whose moves are alike trains nothing). It needs no recurring states,
so it serves games like Tic-Tac-Toe where later positions rarely repeat in a batch
(`sampled_and_best` keeps every turn's own advantage as well: the estimator's push on the
played move, and the best move's label beside it); the reply
trained for a move the turn did not sample is the batch's most sampled valid completion of that
move by the same game and role, in any state (a reply that names a move names it whatever the
position), with unknown behaviour log-probs (importance weight 1).

Pure, like the estimators: polars in, polars out; the trainer never knows a row was added.
"""
from __future__ import annotations

import hashlib
import json

import polars as pl

# COUNTERFACTUAL marks an added row (False on the batch's own)
from mars_core.types import ACTION_VALUES_DTYPE, COUNTERFACTUAL, decode_action_values

STATE_KEYS = ("game", "role")  # with the prompt tokens: one state as the policy sees it
_STATE, _ROW, _COMP = "__cf_state", "__cf_row", "__cf_completion"
# what an added row takes from the turn that sampled its completion
TAKEN = ("completion_ids", "logprobs", "temperature", "reply", "action")
GREEDY_ADVANTAGE = 1.0  # the advantage of a greedy row: a cross-entropy step toward the action
DECIMALS = 9  # action values compared after rounding, so float noise cannot make or break a tie
TRAJECTORY = ("episode_id", "player")  # one seat of one episode: its return-to-go
GREEDY_MEMORY = "greedy_memory"  # the memory's key in the state saved with a checkpoint


def _token_key(col: str) -> pl.Expr:
    """A list of token ids as one comparable string."""
    return pl.col(col).list.eval(pl.element().cast(pl.Utf8)).list.join(",")


def _checked(df: pl.DataFrame, mode: str, extra: tuple[str, ...] = ()) -> None:
    for col in ("advantage", "prompt_ids", "completion_ids", "action", "valid", *STATE_KEYS,
                *extra):
        if col not in df.columns:
            raise ValueError(f"train_actions: {mode} needs the column '{col}' in the batch")


def with_all_actions(df: pl.DataFrame) -> pl.DataFrame:
    """`df` (turns with an `advantage` column) with a `counterfactual` column (False on its own
    rows) and, after them, one added row (True) for every turn and every other valid action
    seen in the turn's state: the turn's identity and prompt, that action's most sampled
    completion there and the mean advantage of the turns that took it there (the all-action
    policy gradient)."""
    _checked(df, "all")
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


def _state_id(row: dict) -> str:
    """A state's short stable name (the memory's key): its game, role and prompt tokens."""
    text = json.dumps([row["game"], row["role"], list(row["prompt_ids"])])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _return_to_go(df: pl.DataFrame) -> list[float]:
    """Each turn's undiscounted return from that turn on within its seat's trajectory."""
    rtg = (df.with_row_index(_ROW).sort([*TRAJECTORY, "turn"], descending=[False, False, True])
           .with_columns(pl.col("reward").cum_sum().over(TRAJECTORY).alias("__rtg"))
           .sort(_ROW))
    return rtg["__rtg"].to_list()


def with_greedy_actions(df: pl.DataFrame, memory: dict | None = None, window: int = 0,
                        max_states: int | None = None) -> tuple[pl.DataFrame, dict]:
    """(`df` with a `counterfactual` column and the greedy rows, the memory after this batch).

    An action's value in a state is the mean return-to-go of the batch's valid turns that took
    it there; with `window` > 0 it is blended with `memory` (state id -> action -> [value,
    count, completion]: a running mean whose old count is capped at `window`), and actions seen
    in earlier batches only keep their remembered value and completion. Where a visited state
    has two or more valued actions and one of highest value (the greedy action), every turn
    trains that action alone with advantage 1: a turn that took it gets advantage 1, a turn
    that took another valid action 0, and a turn that did not take it an added row of it (the
    completion most sampled for it there, else the remembered one with unknown behaviour
    log-probs); an invalid turn keeps its own advantage. Other states' turns are unchanged.
    The memory keeps its states in the order they were last measured; with `max_states` it keeps
    at most that many, forgetting the least recently measured first (after this batch's labels
    are chosen), so a game of many positions cannot grow it without bound."""
    _checked(df, "greedy", ("episode_id", "player", "turn", "reward"))
    memory = {} if window <= 0 else {s: {a: list(v) for a, v in acts.items()}
                                     for s, acts in (memory or {}).items()}
    rows = df.to_dicts()
    rtg = _return_to_go(df) if rows else []
    state = [_state_id(r) for r in rows]
    seen: dict[tuple, list[int]] = {}  # (state, action) -> rows that took it
    for i, r in enumerate(rows):
        if r["valid"] and r["action"] and r["completion_ids"]:
            seen.setdefault((state[i], r["action"]), []).append(i)
    values: dict[str, dict[str, tuple[float, list[int], list[float] | None, float]]] = {}
    for (s, action), ix in seen.items():
        mean = sum(rtg[i] for i in ix) / len(ix)
        comps: dict[tuple, list[int]] = {}
        for i in ix:
            comps.setdefault(tuple(rows[i]["completion_ids"]), []).append(i)
        src = rows[min((-len(c), c[0]) for c in comps.values())[1]]
        if window > 0:
            old = memory.get(s, {}).get(action)
            n_old = min(old[1], window) if old else 0
            value = (n_old * old[0] + len(ix) * mean) / (n_old + len(ix)) if old else mean
            memory[s] = memory.pop(s, {})  # the state becomes the most recently measured
            memory[s][action] = [value, n_old + len(ix), list(src["completion_ids"])]
            mean = value
        values.setdefault(s, {})[action] = (mean, list(src["completion_ids"]),
                                            list(src["logprobs"] or []), src["temperature"])
    for s in set(state):
        for action, (value, _, completion) in memory.get(s, {}).items():
            values.setdefault(s, {}).setdefault(action, (value, completion, None, None))
    greedy: dict[str, str] = {}
    for s, acts in values.items():
        top = max(round(v[0], DECIMALS) for v in acts.values())
        winners = sorted(a for a, v in acts.items() if round(v[0], DECIMALS) == top)
        if len(acts) > 1 and len(winners) == 1:
            greedy[s] = winners[0]
    out = [{**r, COUNTERFACTUAL: False} for r in rows]
    added = []
    for i, r in enumerate(rows):
        g = greedy.get(state[i])
        if g is None:
            continue
        if r["valid"] and r["action"]:
            out[i]["advantage"] = GREEDY_ADVANTAGE if r["action"] == g else 0.0
        if r["action"] != g:
            _, completion, logprobs, temperature = values[state[i]][g]
            added.append({**r, "completion_ids": completion, "logprobs": logprobs or [],
                          "temperature": r["temperature"] if temperature is None else temperature,
                          "reply": "", "action": g, "advantage": GREEDY_ADVANTAGE,
                          COUNTERFACTUAL: True})
    frame = pl.DataFrame(out + added, schema={**df.schema, COUNTERFACTUAL: pl.Boolean})
    if max_states is not None and len(memory) > max_states:
        memory = dict(list(memory.items())[len(memory) - max_states:])
    return frame, memory


def with_all_actions_reference(df: pl.DataFrame) -> pl.DataFrame:
    """The plain-loop twin of `with_all_actions` (the tests hold it to this)."""
    _checked(df, "all")
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


def _best_move(values: dict[str, float], played: str) -> tuple[str, float] | None:
    """(a state's best-valued move, its value minus the state's mean), or None without values.
    Ties at the top (after rounding) go to the move the turn played, else to the first
    measured: any best move is as good as another."""
    if not values:
        return None
    top = max(round(v, DECIMALS) for v in values.values())
    best = [a for a, v in values.items() if round(v, DECIMALS) == top]
    move = played if played in best else best[0]
    return move, values[move] - sum(values.values()) / len(values)


def _label_completions(df: pl.DataFrame) -> dict[tuple, list[int]]:
    """(game, role, action) -> the completion most sampled for it by the batch's valid turns
    (ties: the first in row order)."""
    seen: dict[tuple, dict[tuple, list[int]]] = {}
    for i, r in enumerate(df.iter_rows(named=True)):
        if r["valid"] and r["action"] and r["completion_ids"]:
            seen.setdefault((r["game"], r["role"], r["action"]), {}).setdefault(
                tuple(r["completion_ids"]), []).append(i)
    return {k: list(min(comps.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))[0])
            for k, comps in seen.items()}


def _unit(gap: float) -> float:
    """`label_advantage: unit`: a label's advantage, 1 where its move is worth more than the
    state's mean (after rounding), else 0 (moves alike: nothing to learn)."""
    return GREEDY_ADVANTAGE if round(gap, DECIMALS) > 0 else 0.0


def with_best_valued(df: pl.DataFrame, keep_sampled: bool = False,
                     unit: bool = False) -> pl.DataFrame:
    """`df` with a `counterfactual` column and, where a turn's state has Monte-Carlo values and
    the batch has a reply for its best-valued move, that move trained with advantage
    Q(s, best) - V(s): a valid turn that played it gets that advantage, a valid turn that played
    another move 0, and a turn that did not play it an added row of it (the batch's most sampled
    completion of that move by the same game and role, behaviour log-probs unknown, the turn's
    temperature); an invalid turn keeps its own advantage. Other turns are unchanged. With
    `keep_sampled` (`train_actions: sampled_and_best`) every turn keeps its own advantage and
    only the added rows change the batch: the played move's push and the best move's label.
    With `unit` (`label_advantage: unit`) a label's advantage is 1 where its gap is positive and
    0 where it is not: the values choose the move, the step is the greedy update's."""
    _checked(df, "sampled_and_best" if keep_sampled else "best_valued",
             ("action_values", "logprobs", "temperature", "reply"))
    own = df.with_columns(pl.lit(False).alias(COUNTERFACTUAL))
    if df.is_empty():
        return own
    keyed = own.with_row_index(_ROW)
    measured = (keyed.select(_ROW, pl.col("action").alias("__bv_played"),
                             pl.col("action_values").replace("", None)
                             .str.json_decode(ACTION_VALUES_DTYPE).alias("__bv"))
                .explode("__bv").unnest("__bv").filter(pl.col("value").is_not_null())
                .with_row_index("__bv_order"))
    top = (measured.with_columns(pl.col("value").round(DECIMALS).alias("__bv_r"),
                                 pl.col("value").mean().over(_ROW).alias("__bv_mean"))
           .with_columns((pl.col("__bv_r") == pl.col("__bv_r").max().over(_ROW)).alias("__bv_top")))
    best = (top.filter(pl.col("__bv_top"))
            .sort(_ROW, pl.col("action") != pl.col("__bv_played"), "__bv_order")
            .unique(_ROW, keep="first", maintain_order=True)
            .select(_ROW, pl.col("action").alias("__bv_action"),
                    (pl.col("value") - pl.col("__bv_mean")).alias("__bv_gap")))
    if unit:
        best = best.with_columns(pl.when(pl.col("__bv_gap").round(DECIMALS) > 0)
                                 .then(GREEDY_ADVANTAGE).otherwise(0.0).alias("__bv_gap"))
    taken = keyed.filter(pl.col("valid") & (pl.col("action") != "")
                         & (pl.col("completion_ids").list.len() > 0))
    replies = (taken.with_columns(_token_key("completion_ids").alias(_COMP))
               .group_by("game", "role", "action", _COMP)
               .agg(pl.len().alias("__bv_n"), pl.col(_ROW).min().alias("__bv_first"))
               .sort(["__bv_n", "__bv_first"], descending=[True, False])
               .unique(["game", "role", "action"], keep="first", maintain_order=True)
               .join(keyed.select(_ROW, pl.col("completion_ids").alias("__bv_completion")),
                     left_on="__bv_first", right_on=_ROW)
               .select("game", "role", pl.col("action").alias("__bv_action"), "__bv_completion"))
    joined = (keyed.join(best, on=_ROW, how="left")
              .join(replies, on=["game", "role", "__bv_action"], how="left")
              .sort(_ROW))
    played = pl.col("valid") & (pl.col("action") == pl.col("__bv_action"))
    labelled = (pl.col("__bv_action").is_not_null()
                & (played | pl.col("__bv_completion").is_not_null()))
    own_adv = (pl.col("advantage") if keep_sampled else
               pl.when(labelled & played).then(pl.col("__bv_gap"))
               .when(labelled & pl.col("valid")).then(0.0)
               .otherwise(pl.col("advantage")))
    own = joined.with_columns(own_adv.alias("advantage")).select(own.columns)
    added = (joined.filter(labelled & ~played)
             .with_columns(pl.col("__bv_completion").alias("completion_ids"),
                           pl.lit([], dtype=df.schema["logprobs"]).alias("logprobs"),
                           pl.lit("").alias("reply"), pl.col("__bv_action").alias("action"),
                           pl.col("__bv_gap").alias("advantage"),
                           pl.lit(True).alias(COUNTERFACTUAL))
             .select(own.columns))
    return pl.concat([own, added], how="vertical")


def with_best_valued_reference(df: pl.DataFrame, keep_sampled: bool = False,
                               unit: bool = False) -> pl.DataFrame:
    """The plain-loop twin of `with_best_valued` (the tests hold it to this)."""
    _checked(df, "sampled_and_best" if keep_sampled else "best_valued",
             ("action_values", "logprobs", "temperature", "reply"))
    replies = _label_completions(df)
    out, added = [], []
    for r in df.iter_rows(named=True):
        row = {**r, COUNTERFACTUAL: False}
        found = _best_move(decode_action_values(r["action_values"]), r["action"])
        played = found is not None and r["valid"] and r["action"] == found[0]
        reply = replies.get((r["game"], r["role"], found[0])) if found else None
        if found is not None and (played or reply is not None):
            move, gap = found
            gap = _unit(gap) if unit else gap
            if r["valid"] and not keep_sampled:
                row["advantage"] = gap if played else 0.0
            if not played:
                added.append({**r, "completion_ids": reply, "logprobs": [], "reply": "",
                              "action": move, "advantage": gap, COUNTERFACTUAL: True})
        out.append(row)
    return pl.DataFrame(out + added, schema={**df.schema, COUNTERFACTUAL: pl.Boolean})
