"""Episodes bank and stratified batch builder (SPEC section 5, item 5).

After post-processing, every training iteration k yields a polars frame of the policy's
ELIGIBLE turns (one row per turn: `episode_id, game, player, role, turn, reward, prompt_ids,
completion_ids, logprobs, ...`), stored in the episodes bank (`mars_core.batching.bank`: one parquet
part per iteration); `build_batch` draws a training batch from a window of its parts. A turn
is identified by `turn_id = f"{episode_id}/{turn}"`
(`turn` is unique within an episode); a trajectory is the rows sharing `(episode_id, player)`:
one seat's turns (two seats may share a role, e.g. two Mafia).

What is drawn is a *unit*: one turn (unit "turn", In2AI's "step") or one player's whole trajectory
(unit "trajectory", what return-based estimators such as MARS need). The dealing rules:

- **Round-robin by game.** The dealer cycles over the games (sorted), one unit per game per
  round, so no game dominates the batch because it happens to produce more turns (long
  Codenames episodes against short Blotto ones); a game that runs out leaves the cycle and
  the others fill the rest.
- **Quantile reward bins.** Within a game, units are ranked by reward (a turn's reward, or a
  trajectory's return) and split into `reward_bins` equal-count bins; each game cycles over
  its bins, so bad, average and good units enter in equal shares whatever the skew of the
  reward distribution (e.g. a policy that mostly loses still sees its wins).
- **Per-episode cap.** At most `max_turns_per_episode` turns of one episode enter a batch
  (a unit that would exceed it is dropped for this batch), so one long episode does not
  dominate and the batch spreads over many episodes (more independent samples). A trajectory
  is never split: the first unit of an episode always enters, even if longer than the cap.
- **Exclusion.** Turns already trained on (`exclude`, a set of turn ids) are dropped first,
  so a turn is trained on once unless the config asks for reuse (then pass nothing).

Everything is deterministic in `seed` and the unit ids only (never in the pool's row order):
the pool is put in a canonical order first and each `(game, bin)` queue is the sorted unit
ids shuffled by a `random.Random` seeded from `(seed, game, bin)`.

Pure functions over polars frames.
"""
from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Collection
from dataclasses import dataclass

import polars as pl

UNITS = ("turn", "trajectory")
FORMER_ID = "step_id"  # `turn_id`'s name in batches and bank parts written before the rename
REQUIRED_COLUMNS = ("episode_id", "game", "player", "role", "turn", "reward")
TRAJECTORY_KEYS = ("episode_id", "player")
CANONICAL_ORDER = ("game", "episode_id", "turn")

_ROW = "__batch_row"
_VALUE = "__batch_value"


# --------------------------------------------------------------------------------------------
# ids and reward bins


def with_turn_ids(df: pl.DataFrame) -> pl.DataFrame:
    """Add (or replace) the Utf8 `turn_id` column, `f"{episode_id}/{turn}"`, unique per turn
    (a bank part written before the rename carries the same ids as `step_id`: dropped)."""
    for col in ("episode_id", "turn"):
        if col not in df.columns:
            raise ValueError(f"missing required column '{col}' to build turn ids")
    sid = pl.format("{}/{}", pl.col("episode_id"), pl.col("turn")).cast(pl.Utf8)
    return df.drop(FORMER_ID, strict=False).with_columns(sid.alias("turn_id"))


def _check_unit(unit: str) -> None:
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")


def _check_positive(name: str, value: object, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        suffix = " (or None)" if allow_none else ""
        raise ValueError(f"{name} must be an int >= 1{suffix}, got {value!r}")


def _check_pool(pool: pl.DataFrame) -> None:
    for col in REQUIRED_COLUMNS:
        if col not in pool.columns:
            raise ValueError(f"missing required column '{col}' in the turns pool")
    for col in REQUIRED_COLUMNS:
        if pool[col].null_count():
            raise ValueError(f"column '{col}' has null values in the turns pool")


def _bin_expr(bins: int) -> pl.Expr:
    """`min(bins-1, floor(bins * (rank-1) / n))`, rank = average rank of the value in its game.

    Average ranks make equal values share a bin; `n` = number of units of the game.
    """
    rank = pl.col(_VALUE).rank("average").over("game")
    n = pl.len().over("game")
    raw = (bins * (rank - 1) / n).floor().cast(pl.Int64)
    return pl.min_horizontal(raw, pl.lit(bins - 1, dtype=pl.Int64))


def reward_bins(pool: pl.DataFrame, unit: str, bins: int) -> pl.Series:
    """Int64 Series `reward_bin`, aligned with the rows of `pool`, 0 = lowest rewards.

    Per game, over the pool's units: a unit's value is the turn's `reward` (unit "turn") or
    the trajectory return = sum of its turns' rewards (unit "trajectory"; every turn of a
    trajectory gets its trajectory's bin). See `_bin_expr` for the formula.
    """
    _check_unit(unit)
    _check_positive("reward_bins", bins, allow_none=False)
    _check_pool(pool)
    return _bin_series(pool, unit, bins)


def _bin_series(pool: pl.DataFrame, unit: str, bins: int) -> pl.Series:
    """`reward_bins` without the argument checks."""
    reward = pl.col("reward").cast(pl.Float64)
    if unit == "turn":
        out = pool.select(reward.alias(_VALUE), "game")
        return out.select(_bin_expr(bins).alias("reward_bin")).to_series()
    keys = ["game", *TRAJECTORY_KEYS]
    # canonical order inside each trajectory, so the float sum does not depend on row order
    units = (pool.select(*keys, "turn", reward.alias(_VALUE)).sort([*keys, "turn"])
             .group_by(keys, maintain_order=True).agg(pl.col(_VALUE).sum())
             .with_columns(_bin_expr(bins).alias("reward_bin")).drop(_VALUE))
    joined = pool.select(keys).with_row_index(_ROW).join(units, on=keys, how="left")
    return joined.sort(_ROW)["reward_bin"]


# --------------------------------------------------------------------------------------------
# batch builder


@dataclass(frozen=True)
class _Unit:
    """One drawable unit: a turn or a trajectory, with its rows in the canonical pool."""

    key: tuple
    game: str
    bin: int
    episode_id: str
    rows: tuple[int, ...]


def _prepare(pool: pl.DataFrame, exclude: Collection[str]) -> tuple[pl.DataFrame, int]:
    """Turn ids, canonical order (game, episode_id, turn), excluded turns dropped.

    Returns (remaining turns, number of pool turns excluded). Raises on duplicate turn ids.
    """
    df = with_turn_ids(pool)
    if df["turn_id"].n_unique() != df.height:
        raise ValueError("duplicate turn_id in the turns pool: (episode_id, turn) must be unique")
    df = df.sort(list(CANONICAL_ORDER))
    drop = list(exclude)
    if not drop:
        return df, 0
    kept = df.filter(~pl.col("turn_id").is_in(drop))
    return kept, df.height - kept.height


def _units(df: pl.DataFrame, unit: str) -> list[_Unit]:
    """The units of `df` (canonical order, with `reward_bin`); key = (episode_id, turn|player)."""
    idx = df.select("game", "episode_id", "player", "turn", "reward_bin").with_row_index(_ROW)
    if unit == "turn":
        return [_Unit((e, t), g, b, e, (i,))
                for i, g, e, _, t, b in idx.iter_rows()]
    grouped = idx.group_by(["game", *TRAJECTORY_KEYS], maintain_order=True).agg(
        pl.col(_ROW), pl.col("reward_bin").first())
    return [_Unit((e, p), g, b, e, tuple(rows))
            for g, e, p, rows, b in grouped.select(
                "game", "episode_id", "player", _ROW, "reward_bin").iter_rows()]


def _queues(units: list[_Unit], seed: int) -> dict[str, dict[int, deque[_Unit]]]:
    """Per game, per bin: the units sorted by key, shuffled by Random(f"{seed}/{game}/{bin}").

    A string seed is hashed with SHA-512 by `random`, so the order is stable across processes
    and depends only on the seed and the unit ids.
    """
    groups: dict[str, dict[int, list[_Unit]]] = {}
    for u in units:
        groups.setdefault(u.game, {}).setdefault(u.bin, []).append(u)
    out: dict[str, dict[int, deque[_Unit]]] = {}
    for game in sorted(groups):
        out[game] = {}
        for b in sorted(groups[game]):
            members = sorted(groups[game][b], key=lambda u: u.key)
            random.Random(f"{seed}/{game}/{b}").shuffle(members)
            out[game][b] = deque(members)
    return out


class _Dealer:
    """Round-robin over games, each game round-robin over its bins, with the episode cap."""

    def __init__(self, queues: dict[str, dict[int, deque[_Unit]]], cap: int | None) -> None:
        self.queues = queues
        self.cap = cap
        self.bin_pos = dict.fromkeys(queues, 0)
        self.episode_turns: Counter[str] = Counter()
        self.capped = 0

    def _fits(self, u: _Unit) -> bool:
        have = self.episode_turns[u.episode_id]
        return self.cap is None or have == 0 or have + len(u.rows) <= self.cap

    def next_unit(self, game: str) -> _Unit | None:
        """The game's next unit: bins tried cyclically from the game's position; within a
        bin, units refused by the cap are dropped. None when every bin queue is empty."""
        bins = sorted(self.queues[game])
        for offset in range(len(bins)):
            pos = (self.bin_pos[game] + offset) % len(bins)
            queue = self.queues[game][bins[pos]]
            while queue:
                u = queue.popleft()
                if self._fits(u):
                    self.bin_pos[game] = pos + 1
                    self.episode_turns[u.episode_id] += len(u.rows)
                    return u
                self.capped += 1
        return None

    def deal(self, size: int | None) -> list[_Unit]:
        """Units in dealing order, stopping at `size` (None: until every queue is empty)."""
        active = list(self.queues)
        taken: list[_Unit] = []
        while active and (size is None or len(taken) < size):
            for game in list(active):
                if size is not None and len(taken) >= size:
                    break
                u = self.next_unit(game)
                if u is None:
                    active.remove(game)
                else:
                    taken.append(u)
        return taken


def _counts(df: pl.DataFrame, col: str) -> dict:
    """{value: rows} of one column, keys sorted."""
    pairs = df.group_by(col).len().sort(col).iter_rows()
    return {k: int(n) for k, n in pairs}


def _composition(batch: pl.DataFrame, taken: list[_Unit], stats: dict) -> dict:
    """The batch's make-up; `stats` carries the pool-level counts."""
    game_bin = Counter(f"{u.game}/{u.bin}" for u in taken)
    return {
        "units": len(taken),
        "steps": batch.height,
        "episodes": batch["episode_id"].n_unique() if batch.height else 0,
        **stats,
        "by_game": _counts(batch, "game"),
        "by_role": _counts(batch, "role"),
        "by_bin": _counts(batch, "reward_bin"),
        "by_game_bin": dict(sorted(game_bin.items())),
    }


def build_batch(pool: pl.DataFrame, *, unit: str, size: int | None, seed: int,
                max_turns_per_episode: int | None, reward_bins: int,
                exclude: Collection[str] = ()) -> tuple[pl.DataFrame, dict]:
    """Draw one stratified training batch from the turns pool.

    1. drop the turns whose `turn_id` is in `exclude`; a trajectory unit is its remaining turns;
    2. per game, quantile reward bins over the remaining units (`reward_bins`);
    3. per (game, bin), a queue of units ordered by seed and unit ids only;
    4. deal round-robin over games, each game round-robin over its bins, skipping units that
       would push their episode over `max_turns_per_episode` (unless the episode has no turn
       in the batch yet), until `size` units (None: all units).

    Returns (batch, composition). The batch has every pool column plus `turn_id` (Utf8) and
    `reward_bin` (Int64), sorted by (game, episode_id, turn). Composition keys (their
    names kept from when a turn was called a step, as the MLflow metrics): units, steps (turns),
    episodes (distinct), pool_units (units left after exclusion), pool_steps (pool rows before
    exclusion), excluded_steps (pool rows dropped by `exclude`), capped_units (units refused
    by the cap), by_game / by_role / by_bin {key: steps}, by_game_bin {"game/bin": units}.
    With unit "turn", size None, 1 bin, no cap and nothing excluded the batch is the pool.
    """
    _check_unit(unit)
    _check_positive("size", size, allow_none=True)
    _check_positive("reward_bins", reward_bins, allow_none=False)
    _check_positive("max_turns_per_episode", max_turns_per_episode, allow_none=True)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    _check_pool(pool)
    df, excluded = _prepare(pool, exclude)
    df = df.with_columns(_bin_series(df, unit, reward_bins))
    units = _units(df, unit)
    dealer = _Dealer(_queues(units, seed), max_turns_per_episode)
    taken = dealer.deal(size)
    rows = sorted(i for u in taken for i in u.rows)
    batch = df[rows] if rows else df.clear()
    stats = {"pool_units": len(units), "pool_steps": pool.height, "excluded_steps": excluded,
             "capped_units": dealer.capped}
    return batch, _composition(batch, taken, stats)


def composition_metrics(comp: dict) -> dict[str, float]:
    """Flat float metrics for MLflow: `batch/{units,steps,episodes,pool_units,pool_steps,
    excluded_steps,capped_units}` and steps per game, role and bin as `batch/game/<g>`,
    `batch/role/<r>`, `batch/bin/<b>`. Missing scalar keys are skipped."""
    out: dict[str, float] = {}
    for key in ("units", "steps", "episodes", "pool_units", "pool_steps", "excluded_steps",
                "capped_units"):
        if key in comp:
            out[f"batch/{key}"] = float(comp[key])
    for field, prefix in (("by_game", "game"), ("by_role", "role"), ("by_bin", "bin")):
        for k, v in comp.get(field, {}).items():
            out[f"batch/{prefix}/{k}"] = float(v)
    return out
