"""Episodes bank and stratified batch builder: strata shares, episode cap, determinism,
exclusion, whole trajectories, tied rewards, bank files, composition."""
from __future__ import annotations

import random

import polars as pl
import pytest

from mars_core.batching.bank import bank_add, bank_read
from mars_core.batching.builder import build_batch, composition_metrics, reward_bins, with_turn_ids
from mars_core.run.layout import bank_part

SCHEMA = {"episode_id": pl.Utf8, "game": pl.Utf8, "role": pl.Utf8, "turn": pl.Int64,
          "reward": pl.Float64, "completion_ids": pl.List(pl.Int64)}


def pool_frame(rows: list[tuple]) -> pl.DataFrame:
    """Rows of `SCHEMA`'s columns; role "pN" is held by seat N (`player`)."""
    df = pl.DataFrame(rows, schema=SCHEMA, orient="row")
    return df.with_columns(pl.col("role").str.slice(1).cast(pl.Int64).alias("player"))


def make_pool(spec: dict[str, tuple[int, int]], seed: int = 0, roles: int = 2) -> pl.DataFrame:
    """`spec` = {game: (episodes, turns per episode)}; roles alternate by turn. Rewards are
    skewed (mostly small, a few large) and distinct."""
    rng = random.Random(seed)
    rows = []
    for game, (n_ep, n_turns) in spec.items():
        for e in range(n_ep):
            for t in range(n_turns):
                reward = rng.expovariate(1.0) ** 3 * (1 if game < "m" else -1)
                rows.append((f"{game}-{e}", game, f"p{t % roles}", t, reward, [e, t]))
    return pool_frame(rows)


def draw(pool: pl.DataFrame, **kw) -> tuple[pl.DataFrame, dict]:
    args = {"unit": "turn", "size": None, "seed": 0, "max_turns_per_episode": None,
            "reward_bins": 1} | kw
    return build_batch(pool, **args)


# ---------------------------------------------------------------------------- strata


def test_strata_equal_shares_per_game_and_bin():
    pool = make_pool({"blotto": (20, 6), "tic_tac_toe": (12, 5)})
    batch, comp = draw(pool, size=30, reward_bins=3)
    assert comp["units"] == comp["steps"] == batch.height == 30
    assert comp["by_game"] == {"blotto": 15, "tic_tac_toe": 15}
    assert comp["by_game_bin"] == {f"{g}/{b}": 5 for g in ("blotto", "tic_tac_toe")
                                   for b in range(3)}
    # the bins really are reward quantiles: every bin-0 reward <= every bin-2 reward per game
    for _, g in batch.group_by("game"):
        assert g.filter(pl.col("reward_bin") == 0)["reward"].max() <= \
            g.filter(pl.col("reward_bin") == 2)["reward"].min()


def test_short_game_leaves_the_cycle_and_the_other_fills_the_rest():
    pool = make_pool({"blotto": (20, 6), "tic_tac_toe": (2, 2)})
    batch, comp = draw(pool, size=30, reward_bins=3)
    assert comp["by_game"] == {"blotto": 26, "tic_tac_toe": 4}
    blotto_bins = sorted(v for k, v in comp["by_game_bin"].items() if k.startswith("blotto"))
    assert blotto_bins == [8, 9, 9]


def test_trajectory_units_round_robin_by_game():
    pool = make_pool({"blotto": (10, 6), "tic_tac_toe": (10, 2)})
    _, comp = draw(pool, unit="trajectory", size=8, reward_bins=2)
    assert comp["units"] == 8
    games = {k.split("/")[0]: 0 for k in comp["by_game_bin"]}
    for k, v in comp["by_game_bin"].items():
        games[k.split("/")[0]] += v
    assert games == {"blotto": 4, "tic_tac_toe": 4}
    # blotto trajectories have 3 steps, tic-tac-toe ones 1 step
    assert comp["by_game"] == {"blotto": 12, "tic_tac_toe": 4}


# ---------------------------------------------------------------------------- episode cap


def test_cap_bounds_steps_per_episode_and_spreads_over_episodes():
    pool = make_pool({"codenames": (25, 8)})
    capped, comp = draw(pool, size=20, max_turns_per_episode=1, seed=3)
    per_episode = capped.group_by("episode_id").len()["len"]
    assert per_episode.max() == 1
    assert comp["capped_units"] > 0
    free, free_comp = draw(pool, size=20, seed=3)
    assert comp["episodes"] == 20 > free_comp["episodes"]
    two, _ = draw(pool, size=None, max_turns_per_episode=2, seed=1)
    assert two.group_by("episode_id").len()["len"].max() == 2
    assert two.height == 50  # every episode reaches the cap, nothing more


def test_long_trajectory_enters_alone_despite_the_cap():
    long = pool_frame([("long", "ipd", "p0", t, 0.1 * t, [t]) for t in range(10)])
    pool = pl.concat([long, make_pool({"ipd": (4, 2)}, roles=1)])
    batch, comp = draw(pool, unit="trajectory", max_turns_per_episode=3)
    assert batch.filter(pl.col("episode_id") == "long").height == 10
    assert comp["units"] == 5 and comp["capped_units"] == 0
    # a second trajectory of the same episode would exceed the cap: refused
    extra = pool_frame([("long", "ipd", "p1", 10, 0.0, [0])])
    batch2, comp2 = draw(pl.concat([pool, extra]), unit="trajectory", max_turns_per_episode=3)
    assert comp2["capped_units"] == 1
    assert batch2.filter(pl.col("episode_id") == "long")["role"].n_unique() == 1


# ---------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("unit", ["turn", "trajectory"])
def test_same_seed_same_batch_and_row_order_does_not_matter(unit):
    pool = make_pool({"blotto": (15, 5), "kuhn_poker": (15, 3)})
    kw = {"unit": unit, "size": 12, "reward_bins": 3, "max_turns_per_episode": 4, "seed": 7}
    first, comp = draw(pool, **kw)
    again, comp_again = draw(pool, **kw)
    shuffled, comp_shuffled = draw(pool.sample(fraction=1.0, shuffle=True, seed=11), **kw)
    assert first.equals(again) and first.equals(shuffled)
    assert comp == comp_again == comp_shuffled
    others = [set(draw(pool, **(kw | {"seed": s}))[0]["turn_id"]) for s in range(8, 12)]
    assert any(o != set(first["turn_id"]) for o in others)


def test_batch_sorted_by_game_episode_turn():
    pool = make_pool({"blotto": (6, 4), "kuhn_poker": (6, 3)})
    batch, _ = draw(pool.reverse(), size=10, reward_bins=2)
    assert batch.equals(batch.sort(["game", "episode_id", "turn"]))


# ---------------------------------------------------------------------------- exclusion


def test_excluded_steps_never_appear_and_are_counted():
    pool = with_turn_ids(make_pool({"blotto": (5, 4)}))
    exclude = set(pool["turn_id"].to_list()[::3])
    batch, comp = draw(pool, exclude=exclude, reward_bins=2)
    assert not exclude & set(batch["turn_id"])
    assert comp["excluded_steps"] == len(exclude)
    assert comp["pool_steps"] == pool.height
    assert batch.height == pool.height - len(exclude)


@pytest.mark.parametrize("unit", ["turn", "trajectory"])
def test_successive_batches_never_repeat_a_step(unit):
    pool = make_pool({"blotto": (8, 4), "kuhn_poker": (5, 3)})
    seen: set[str] = set()
    for k in range(100):
        batch, _ = draw(pool, unit=unit, size=5, seed=k, reward_bins=3,
                        max_turns_per_episode=3, exclude=seen)
        if batch.is_empty():
            break
        ids = set(batch["turn_id"])
        assert not ids & seen
        seen |= ids
    assert seen == set(with_turn_ids(pool)["turn_id"])


@pytest.mark.parametrize("unit", ["turn", "trajectory"])
def test_defaults_give_the_whole_pool(unit):
    pool = make_pool({"blotto": (4, 3), "kuhn_poker": (3, 2)})
    batch, comp = draw(pool, unit=unit)
    expected = with_turn_ids(pool).sort(["game", "episode_id", "turn"])
    assert batch.drop("reward_bin").equals(expected)
    assert comp["pool_units"] == comp["units"]


# ---------------------------------------------------------------------------- trajectories


def test_drawn_trajectories_are_complete():
    pool = with_turn_ids(make_pool({"blotto": (10, 6), "kuhn_poker": (10, 4)}, seed=2))
    exclude = {s for s in pool["turn_id"] if s.endswith("/0")}
    batch, comp = draw(pool, unit="trajectory", size=7, reward_bins=2, exclude=exclude)
    assert comp["units"] == 7 == batch.select("episode_id", "role").n_unique()
    remaining = pool.filter(~pl.col("turn_id").is_in(list(exclude)))
    for (ep, role), rows in batch.group_by(["episode_id", "role"]):
        want = remaining.filter((pl.col("episode_id") == ep) & (pl.col("role") == role))
        assert set(rows["turn_id"]) == set(want["turn_id"])
    # every step of a trajectory carries the trajectory's bin
    assert batch.group_by(["episode_id", "role"]).agg(pl.col("reward_bin").n_unique())[
        "reward_bin"].max() == 1


# ---------------------------------------------------------------------------- bins


def test_bins_formula_and_ties():
    rows = [(f"e{i}", "g", "p0", 0, r, []) for i, r in enumerate([5.0, 1.0, 3.0, 2.0, 6.0, 4.0])]
    rows += [(f"t{i}", "h", "p0", 0, r, []) for i, r in enumerate([0.0] * 4 + [1.0] * 2)]
    rows += [(f"k{i}", "k", "p0", 0, r, []) for i, r in enumerate([1.0, 0.0, 1.0, 2.0, 1.0, 1.0])]
    pool = pool_frame(rows)
    bins = reward_bins(pool, "turn", 3).to_list()
    assert bins[:6] == [2, 0, 1, 0, 2, 1]
    # ties: four 0.0 share average rank 2.5 -> bin 0; two 1.0 share rank 5.5 -> bin 2
    assert bins[6:12] == [0, 0, 0, 0, 2, 2]
    # four 1.0 share average rank 3.5 -> bin 1 (min rank would give 0, max rank 2)
    assert bins[12:] == [1, 0, 1, 2, 1, 1]
    assert reward_bins(pool, "turn", 1).to_list() == [0] * 18


def test_trajectory_bins_use_returns():
    rows = [("a", "g", "p0", 0, 1.0, []), ("a", "g", "p0", 2, 1.0, []),
            ("a", "g", "p1", 1, 3.0, []), ("b", "g", "p0", 0, 0.5, []),
            ("b", "g", "p1", 1, 2.0, [])]
    pool = pool_frame(rows)
    # returns: a/p0 2.0 (tied with b/p1 2.0), a/p1 3.0, b/p0 0.5 -> ranks 2.5, 4, 1, 2.5
    assert reward_bins(pool, "trajectory", 2).to_list() == [0, 0, 1, 0, 0]
    assert reward_bins(pool, "trajectory", 4).to_list() == [1, 1, 3, 0, 1]


# ---------------------------------------------------------------------------- bank


def test_bank_round_trip_overwrite_and_missing_parts(tmp_path):
    root = tmp_path / "bank"
    assert bank_read(root, [0, 1]).shape == (0, 0)
    p0, p1 = make_pool({"blotto": (2, 3)}, seed=0), make_pool({"blotto": (3, 2)}, seed=1)
    path = bank_add(root, 0, p0)
    assert path == root / "iter_0000.parquet" == bank_part(root, 0)  # the layout names the parts
    bank_add(root, 2, p1.drop("completion_ids"))
    both = bank_read(root, [2, 0, 1, 5])
    assert both.height == p0.height + p1.height
    assert both["iteration"].dtype == pl.Int64
    assert both["iteration"].to_list() == [0] * p0.height + [2] * p1.height
    assert both.filter(pl.col("iteration") == 0).drop("iteration").equals(p0)
    assert both.filter(pl.col("iteration") == 2)["completion_ids"].null_count() == p1.height
    bank_add(root, 0, p1)  # resumed run: same k overwrites
    assert bank_read(root, [0]).drop("iteration").equals(p1)
    missing = bank_read(root, [7])
    assert missing.is_empty() and "iteration" in missing.columns
    assert sorted(p.name for p in root.iterdir()) == ["iter_0000.parquet", "iter_0002.parquet"]


def test_bank_add_is_atomic_on_failure(tmp_path, monkeypatch):
    root = tmp_path / "bank"
    pool = make_pool({"blotto": (2, 3)})
    bank_add(root, 1, pool)

    def broken(self, file, *args, **kwargs):
        with open(file, "wb") as fh:
            fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", broken)
    with pytest.raises(OSError):
        bank_add(root, 1, pool.head(1))
    monkeypatch.undo()
    assert [p.name for p in root.iterdir()] == ["iter_0001.parquet"]
    assert bank_read(root, [1]).drop("iteration").equals(pool)


# ---------------------------------------------------------------------------- composition


def test_composition_counts_match_the_batch_and_metric_names():
    pool = make_pool({"blotto": (6, 4), "kuhn_poker": (6, 3)})
    batch, comp = draw(pool, unit="trajectory", size=9, reward_bins=3, max_turns_per_episode=2,
                       exclude={"blotto-0/0"})
    assert comp["steps"] == batch.height == sum(comp["by_game"].values())
    assert sum(comp["by_role"].values()) == sum(comp["by_bin"].values()) == batch.height
    assert comp["units"] == sum(comp["by_game_bin"].values()) == 9
    assert comp["episodes"] == batch["episode_id"].n_unique()
    assert comp["excluded_steps"] == 1 and comp["pool_steps"] == pool.height
    assert comp["pool_units"] == 24
    for game, n in comp["by_game"].items():
        assert batch.filter(pl.col("game") == game).height == n
    metrics = composition_metrics(comp)
    assert all(isinstance(v, float) for v in metrics.values())
    for key in ("units", "steps", "episodes", "pool_steps", "excluded_steps"):
        assert metrics[f"batch/{key}"] == float(comp[key])
    assert metrics["batch/game/blotto"] == float(comp["by_game"]["blotto"])
    assert {k for k in metrics if k.startswith("batch/role/")} == \
        {f"batch/role/{r}" for r in comp["by_role"]}
    assert {k for k in metrics if k.startswith("batch/bin/")} == \
        {f"batch/bin/{b}" for b in comp["by_bin"]}


def test_empty_pool_gives_an_empty_batch():
    pool = make_pool({"blotto": (2, 2)})
    batch, comp = draw(pool, exclude=set(with_turn_ids(pool)["turn_id"]))
    assert batch.is_empty() and "reward_bin" in batch.columns
    assert comp["units"] == comp["steps"] == comp["episodes"] == 0


# ---------------------------------------------------------------------------- validation


@pytest.mark.parametrize("kw, message", [
    ({"unit": "episode"}, "unit must be one of"),
    ({"size": 0}, "size must be an int >= 1"),
    ({"reward_bins": 0}, "reward_bins must be an int >= 1"),
    ({"max_turns_per_episode": 0}, "max_turns_per_episode must be"),
    ({"seed": 1.5}, "seed must be an int"),
])
def test_bad_arguments(kw, message):
    with pytest.raises(ValueError, match=message):
        draw(make_pool({"blotto": (2, 2)}), **kw)


def test_bad_pools(tmp_path):
    pool = make_pool({"blotto": (2, 2)})
    with pytest.raises(ValueError, match="missing required column 'reward'"):
        draw(pool.drop("reward"))
    with pytest.raises(ValueError, match="duplicate turn_id"):
        draw(pl.concat([pool, pool.head(1)]))
    with pytest.raises(ValueError, match="'reward' has null values"):
        draw(pool.with_columns(pl.lit(None, dtype=pl.Float64).alias("reward")))
    with pytest.raises(ValueError, match="iteration must be"):
        bank_add(tmp_path, -1, pool)


def test_two_seats_sharing_a_role_are_two_trajectory_units():
    """Secret Mafia: seats 0 and 2 share the role `mafia`; each seat's turns are one unit, and
    the per-episode cap counts them apart."""
    pool = pl.DataFrame({"episode_id": ["m"] * 4, "game": ["secret_mafia"] * 4,
                         "player": [0, 2, 0, 2], "role": ["mafia"] * 4, "turn": [0, 1, 2, 3],
                         "reward": [1.0, -1.0, 0.5, 0.0]})
    batch, comp = draw(pool, unit="trajectory")
    assert comp["units"] == 2 and batch.height == 4
    capped, comp = draw(pool, unit="trajectory", max_turns_per_episode=2)
    assert comp["units"] == 1 and comp["capped_units"] == 1
    assert capped.height == 2 and capped["player"].n_unique() == 1
