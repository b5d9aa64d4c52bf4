"""Which actions a visit trains (algorithm.train_actions): `all` adds counterfactual rows for
every other valid action seen in a turn's state, `greedy` trains only the state's best measured
action, `best_valued` its state's move of highest Monte-Carlo value; held to plain-loop twins,
and their push on Kuhn Poker against the exact action values."""
from __future__ import annotations

import itertools
import random

import polars as pl
import pytest

from mars_core.advantages.all_actions import (COUNTERFACTUAL, with_all_actions,
                                              with_all_actions_reference, with_best_valued,
                                              with_best_valued_reference, with_greedy_actions)
from mars_core.advantages.estimators import compute_advantages
from mars_core.lab import kuhn
from mars_core.types import TURN_SCHEMA, encode_action_values

REPLY = {"<BET>": [7, 8], "<PASS>": [7, 9], "": [5]}


def _turn(i, prompt, action, adv, *, valid=True, completion=None, role="player_0"):
    comp = completion if completion is not None else REPLY[action]
    return {"turn_id": f"t{i}", "episode_id": f"e{i}", "game": "kuhn_poker", "player": 0,
            "role": role, "turn": 0, "reward": adv, "advantage": adv, "prompt_ids": prompt,
            "completion_ids": comp, "logprobs": [-0.1 * (i + 1)] * len(comp),
            "temperature": 1.0, "reply": f"r{i}", "action": action if valid else "",
            "valid": valid}


def _frame(rows):
    schema = {k: TURN_SCHEMA[k] for k in rows[0] if k in TURN_SCHEMA}
    return pl.DataFrame(rows, schema={**schema, "turn_id": pl.Utf8, "advantage": pl.Float64})


def test_each_visit_trains_the_other_actions_seen_in_its_state():
    rows = [_turn(0, [1, 2], "<BET>", 1.0), _turn(1, [1, 2], "<BET>", 0.5),
            _turn(2, [1, 2], "<PASS>", -2.0),
            _turn(3, [1, 2], "", -3.0, valid=False),  # an invalid reply: gets rows, adds none
            _turn(4, [1, 3], "<BET>", 0.2)]  # another state, one action seen: adds nothing
    out = with_all_actions(_frame(rows))
    own, added = out.filter(~pl.col(COUNTERFACTUAL)), out.filter(pl.col(COUNTERFACTUAL))
    assert own.drop(COUNTERFACTUAL).equals(_frame(rows))  # the batch's own rows unchanged
    got = [(r["turn_id"], r["action"], r["advantage"], r["completion_ids"])
           for r in added.iter_rows(named=True)]
    assert got == [("t0", "<PASS>", -2.0, [7, 9]), ("t1", "<PASS>", -2.0, [7, 9]),
                   ("t2", "<BET>", 0.75, [7, 8]),
                   ("t3", "<BET>", 0.75, [7, 8]), ("t3", "<PASS>", -2.0, [7, 9])]
    # an added row keeps its visit's prompt and the behaviour log-probs of the completion's turn
    assert added["prompt_ids"].to_list() == [[1, 2]] * 5
    assert added["logprobs"].to_list()[2] == [-0.1, -0.1]  # t0 sampled the <BET> reply first


def test_the_most_sampled_completion_of_an_action_is_the_one_trained():
    rows = [_turn(0, [1], "<BET>", 1.0, completion=[7, 8, 1]),
            _turn(1, [1], "<BET>", 1.0, completion=[7, 8]),
            _turn(2, [1], "<BET>", 1.0, completion=[7, 8]),
            _turn(3, [1], "<PASS>", 0.0)]
    added = with_all_actions(_frame(rows)).filter(pl.col(COUNTERFACTUAL))
    assert added.filter(pl.col("turn_id") == "t3")["completion_ids"].to_list() == [[7, 8]]


def test_states_are_split_by_role_as_well_as_prompt():
    rows = [_turn(0, [1], "<BET>", 1.0), _turn(1, [1], "<PASS>", 0.0, role="player_1")]
    assert with_all_actions(_frame(rows)).filter(pl.col(COUNTERFACTUAL)).is_empty()


def test_a_missing_column_is_one_line():
    with pytest.raises(ValueError, match="train_actions: all needs the column 'action'"):
        with_all_actions(_frame([_turn(0, [1], "<BET>", 1.0)]).drop("action"))
    with pytest.raises(ValueError, match="train_actions: greedy needs the column 'reward'"):
        with_greedy_actions(_frame([_turn(0, [1], "<BET>", 1.0)]).drop("reward"))


def test_greedy_trains_the_best_measured_action_of_a_state_and_no_other():
    rows = [_turn(0, [1, 2], "<BET>", 1.0), _turn(1, [1, 2], "<BET>", 0.5),
            _turn(2, [1, 2], "<PASS>", -2.0),
            _turn(3, [1, 2], "", -3.0, valid=False),
            _turn(4, [1, 3], "<BET>", 0.2),  # one action seen: unchanged
            _turn(5, [1, 4], "<BET>", 0.5), _turn(6, [1, 4], "<PASS>", 0.5)]  # a tie: unchanged
    out, memory = with_greedy_actions(_frame(rows))
    assert memory == {}  # no memory asked
    own = out.filter(~pl.col(COUNTERFACTUAL))
    assert own["advantage"].to_list() == [1.0, 1.0, 0.0, -3.0, 0.2, 0.5, 0.5]
    added = out.filter(pl.col(COUNTERFACTUAL))
    assert [(r["turn_id"], r["action"], r["advantage"], r["completion_ids"])
            for r in added.iter_rows(named=True)] == [("t2", "<BET>", 1.0, [7, 8]),
                                                      ("t3", "<BET>", 1.0, [7, 8])]


@pytest.mark.parametrize("seed", range(6))
def test_the_vectorised_rows_equal_the_loop_twin(seed):
    rng = random.Random(seed)
    rows = []
    for i in range(rng.randint(0, 40)):
        action = rng.choice(["<BET>", "<PASS>", "<FOLD>"])
        valid = rng.random() > 0.15
        comp = REPLY.get(action, [7, 10]) + ([] if rng.random() < 0.8 else [rng.randint(1, 3)])
        rows.append(_turn(i, [rng.randint(1, 3)], action, rng.choice([-1.0, 0.0, 0.5, 1.0]),
                          valid=valid, completion=comp, role=rng.choice(["player_0", "player_1"])))
    if not rows:
        rows = [_turn(0, [1], "<BET>", 1.0)]
    df = _frame(rows)
    got, want = with_all_actions(df), with_all_actions_reference(df)
    assert got.columns == want.columns
    assert got.drop("advantage").equals(want.drop("advantage"))
    assert got["advantage"].to_list() == pytest.approx(want["advantage"].to_list())


def test_on_kuhn_the_push_on_j_facing_a_bet_does_not_fade():
    """With exact per-state values and the policy calling with J 96% of the time (the plateau),
    the on-policy push on Jb's <BET> is p(1-p) x gap per visit; the all-action rows make it
    (p^2 + (1-p)^2) x gap: 24x stronger, and toward folding; greedy makes it supervision's,
    target - p (-0.96)."""
    q_pass, q_bet = kuhn.action_values(kuhn.best_response(), kuhn.UNIFORM)["Jb"]
    p, visits = 0.96, 100
    n_bet = round(p * visits)
    rows = [{"action": "<BET>", "reward": q_bet}] * n_bet + \
           [{"action": "<PASS>", "reward": q_pass}] * (visits - n_bet)
    df = pl.DataFrame([_turn(i, [4, 2], r["action"], 0.0) | {"reward": r["reward"]}
                       for i, r in enumerate(rows)],
                      schema=_frame([_turn(0, [1], "<BET>", 0.0)]).schema)
    df = compute_advantages(df.drop("advantage"), "mars", group_keys=("game", "role"))

    def push(frame):  # d/dz of sum A log pi(a) on the <BET> logit z, per visit
        sign = frame["action"].map_elements(lambda a: (1 - p) if a == "<BET>" else -p,
                                            return_dtype=pl.Float64)
        return float((frame["advantage"] * sign).sum()) / visits

    on_policy, all_actions = push(df), push(with_all_actions(df))
    greedy = push(with_greedy_actions(df)[0])
    gap = q_bet - q_pass  # -1: calling with J loses a chip more than folding
    assert on_policy == pytest.approx(p * (1 - p) * gap, abs=1e-9)
    assert all_actions == pytest.approx((p * p + (1 - p) ** 2) * gap, abs=1e-9)
    assert all_actions / on_policy > 20
    assert greedy == pytest.approx(0.0 - p, abs=1e-9)  # the probe's supervised push


def test_greedy_values_are_returns_to_go_of_the_seat():
    """A turn's value is what its seat collects from that turn on, not its own reward."""
    first = _turn(0, [1], "<PASS>", 0.0) | {"reward": 0.0}
    later = _turn(0, [2], "<BET>", 0.0) | {"reward": 2.0, "turn": 2, "turn_id": "t0b"}
    other = _turn(1, [1], "<BET>", 0.0) | {"reward": 1.0}
    out, _ = with_greedy_actions(_frame([first, later, other]))
    # in state [1], <PASS> led to 2 chips by the end, <BET> to 1: <PASS> is greedy
    assert out.filter(~pl.col(COUNTERFACTUAL))["advantage"].to_list() == [1.0, 0.0, 0.0]
    assert out.filter(pl.col(COUNTERFACTUAL))["action"].to_list() == ["<PASS>"]


def test_greedy_memory_keeps_the_label_of_an_action_no_longer_sampled():
    first = [_turn(0, [1, 2], "<BET>", -2.0), _turn(1, [1, 2], "<PASS>", -1.0)]
    _, memory = with_greedy_actions(_frame(first), {}, window=4)
    assert [v[:2] for v in next(iter(memory.values())).values()] == [[-2.0, 1], [-1.0, 1]]
    # the policy now always bets (calls): <PASS> is not seen, its remembered value still wins
    second = [_turn(i, [1, 2], "<BET>", -2.0) for i in range(2, 5)]
    out, memory = with_greedy_actions(_frame(second), memory, window=4)
    assert out.filter(~pl.col(COUNTERFACTUAL))["advantage"].to_list() == [0.0, 0.0, 0.0]
    added = out.filter(pl.col(COUNTERFACTUAL))
    assert added["action"].to_list() == ["<PASS>"] * 3
    assert added["completion_ids"].to_list() == [[7, 9]] * 3  # the remembered completion
    assert added["logprobs"].to_list() == [[]] * 3  # its behaviour is not known: weight 1
    assert next(iter(memory.values()))["<BET>"][:2] == [-2.0, 4]
    # a running mean whose old count is capped at the window: 4 old at -2.0, 2 new at +1.0
    third = [_turn(i, [1, 2], "<BET>", 1.0) for i in range(5, 7)]
    _, memory = with_greedy_actions(_frame(third), memory, window=4)
    assert next(iter(memory.values()))["<BET>"][:2] == [pytest.approx(-1.0), 6]
    # without a window nothing is remembered
    out, memory = with_greedy_actions(_frame(second), memory, window=0)
    assert memory == {} and not out[COUNTERFACTUAL].any()


def test_greedy_memory_forgets_the_least_recently_measured_states_beyond_its_bound():
    def states(prompt):  # the memory's key of a state measured alone
        return set(with_greedy_actions(_frame([_turn(9, prompt, "<BET>", 0.0)]), {}, 4)[1])

    a, b, c = (states([k, 2]) for k in (1, 3, 5))
    _, memory = with_greedy_actions(_frame([_turn(0, [1, 2], "<BET>", 1.0),
                                            _turn(1, [3, 2], "<BET>", 1.0)]), {}, 4, 2)
    assert set(memory) == a | b
    # a measured again becomes the most recent; c then pushes out b, not a
    _, memory = with_greedy_actions(_frame([_turn(2, [1, 2], "<PASS>", -1.0)]), memory, 4, 2)
    _, memory = with_greedy_actions(_frame([_turn(3, [5, 2], "<BET>", 1.0)]), memory, 4, 2)
    assert set(memory) == a | c and list(memory)[-1] in c
    assert set(next(iter(memory.values()))) == {"<BET>", "<PASS>"}  # a keeps both its actions
    # the bound does not change this batch's labels: a state forgotten after it still trained
    out, memory = with_greedy_actions(_frame([_turn(4, [1, 2], "<BET>", 1.0),
                                              _turn(5, [1, 2], "<PASS>", -1.0),
                                              _turn(6, [3, 2], "<BET>", -1.0),
                                              _turn(7, [3, 2], "<PASS>", 1.0)]), {}, 4, 1)
    assert out.filter(~pl.col(COUNTERFACTUAL))["advantage"].to_list() == [1.0, 0.0, 0.0, 1.0]
    assert set(memory) == b  # the batch's last measured state


def test_the_stage_trains_greedy_rows_and_carries_the_memory_to_the_next_iteration(tmp_path,
                                                                                   monkeypatch):
    """compute_advantages with train_actions: greedy writes the marked rows the trainer reads and
    the memory into the state the checkpoint keeps; the next iteration starts from that state."""
    from mars_core.config import dump_config, load_config
    from mars_core.run.checkpoint import ESTIMATOR_STATE
    from mars_core.run.layout import (BATCH_FILE, BUILD_BATCH, COMPUTE_ADVANTAGES, CONFIG_FILE,
                                      SAMPLES_FILE, SAVE_CHECKPOINT, stage_dir)
    from tasks import batching, stage as stage_module
    from tests.conftest import REPO
    from tests.unit.test_stage import _offline_run_stage

    run = tmp_path / "run"
    run.mkdir()
    cfg = load_config(REPO / "configs" / "smoke.yaml",
                      ["algorithm.train_actions=greedy", "algorithm.action_memory=8",
                       "algorithm.drop_zero_advantage=true"])
    (run / CONFIG_FILE).write_text(dump_config(cfg))
    monkeypatch.setattr(stage_module, "run_stage", _offline_run_stage)
    batches = [[_turn(0, [1, 2], "<BET>", -2.0), _turn(1, [1, 2], "<PASS>", -1.0)],
               [_turn(2, [1, 2], "<BET>", -2.0), _turn(3, [1, 2], "<BET>", -2.0)]]
    for k, rows in enumerate(batches):
        folder = stage_dir(run, k, BUILD_BATCH)
        folder.mkdir(parents=True)
        _frame(rows).drop("advantage").write_parquet(folder / BATCH_FILE)
        metrics = batching.compute_advantages.fn(str(run), k)
        out = stage_dir(run, k, COMPUTE_ADVANTAGES)
        samples = pl.read_parquet(out / SAMPLES_FILE)
        # the checkpoint keeps what compute_advantages wrote (train_step copies it)
        checkpoint = stage_dir(run, k, SAVE_CHECKPOINT)
        checkpoint.mkdir(parents=True)
        (checkpoint / ESTIMATOR_STATE).write_text((out / ESTIMATOR_STATE).read_text())
        assert metrics["batch/remembered_states"] == 1.0
    # iteration 1 saw only <BET>; the fold's value remembered from iteration 0 labels the state
    assert metrics["batch/counterfactual_rows"] == 2.0
    assert samples.filter(pl.col(COUNTERFACTUAL))["completion_ids"].to_list() == [[7, 9]] * 2
    assert samples.filter(~pl.col(COUNTERFACTUAL)).is_empty()  # the calls: advantage 0, dropped


def test_dynamic_sampling_drops_exactly_the_turns_without_signal():
    from tasks.batching import without_zero_advantage

    df = pl.DataFrame({"turn_id": list("abcdef"),
                       "advantage": [0.0, -1.1102e-16, 1e-3, -1.0, 2e-10, -0.0]})
    kept, dropped = without_zero_advantage(df)
    # float dust left by a mean subtracted from equal rewards is no signal; 1e-3 is
    assert kept["turn_id"].to_list() == ["c", "d"] and dropped == 4


def _valued(i, action, values, *, valid=True, role="player_0", adv=0.5):
    """A Tic-Tac-Toe-like turn with Monte-Carlo values of its state's moves."""
    row = _turn(i, [i % 3], action, adv, valid=valid, role=role,
                completion=REPLY.get(action, [7, 10]))
    return {**row, "action_values": encode_action_values(values) if values else ""}


def test_best_valued_trains_each_turns_best_move_by_its_values_gap():
    rows = [_valued(0, "<PASS>", {"<BET>": 1.0, "<PASS>": 0.5, "<FOLD>": 0.0}),  # best BET: +0.5
            _valued(1, "<BET>", {"<BET>": 0.2, "<PASS>": 0.2}),  # a tie it played: gap 0
            _valued(2, "<PASS>", {}),  # nothing measured: unchanged
            _valued(3, "", {"<BET>": 1.0, "<PASS>": -1.0}, valid=False, adv=-1.0),
            _valued(4, "<PASS>", {"<FOLD>": 1.0, "<PASS>": 0.0}, role="player_1"),  # no reply
            _valued(5, "<BET>", {"<PASS>": 0.0, "<BET>": -0.5})]  # best PASS: +0.25
    df = _frame(rows)
    out = with_best_valued(df)
    own, added = out.filter(~pl.col(COUNTERFACTUAL)), out.filter(pl.col(COUNTERFACTUAL))
    # a valid turn that played another move: 0; the invalid one keeps its own; no label: kept
    assert own["advantage"].to_list() == pytest.approx([0.0, 0.0, 0.5, -1.0, 0.5, 0.0])
    assert own.drop("advantage", COUNTERFACTUAL).equals(df.drop("advantage"))
    got = [(r["turn_id"], r["action"], r["completion_ids"], r["logprobs"], r["reply"])
           for r in added.iter_rows(named=True)]
    # the reply trained is the batch's for that move in any state; its behaviour is unknown
    assert got == [("t0", "<BET>", [7, 8], [], ""), ("t3", "<BET>", [7, 8], [], ""),
                   ("t5", "<PASS>", [7, 9], [], "")]
    assert added["advantage"].to_list() == pytest.approx([0.5, 1.0, 0.25])
    assert with_best_valued_reference(df).equals(out)
    with pytest.raises(ValueError, match="train_actions: best_valued needs the column "
                                         "'action_values'"):
        with_best_valued(df.drop("action_values"))
    # sampled_and_best: every own row keeps its advantage; the same rows are added
    both = with_best_valued(df, keep_sampled=True)
    assert both.filter(~pl.col(COUNTERFACTUAL)).drop(COUNTERFACTUAL).equals(df)
    assert both.filter(pl.col(COUNTERFACTUAL)).equals(added)
    assert with_best_valued_reference(df, keep_sampled=True).equals(both)
    # label_advantage unit: the same rows, each label at 1 where its gap is positive, else 0
    unit = with_best_valued(df, unit=True)
    assert unit.drop("advantage").equals(out.drop("advantage"))
    assert unit["advantage"].to_list() == pytest.approx([0.0, 0.0, 0.5, -1.0, 0.5, 0.0,
                                                         1.0, 1.0, 1.0])
    assert with_best_valued_reference(df, unit=True).equals(unit)
    both_unit = with_best_valued(df, keep_sampled=True, unit=True)
    assert both_unit.filter(~pl.col(COUNTERFACTUAL)).drop(COUNTERFACTUAL).equals(df)
    assert both_unit["advantage"].to_list()[6:] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("seed", range(6))
def test_best_valued_rows_equal_the_loop_twin(seed):
    rng = random.Random(seed)
    moves = ["<BET>", "<PASS>", "<FOLD>"]
    rows = []
    for i in range(rng.randint(1, 40)):
        legal = rng.sample(moves, rng.randint(0, 3))
        values = {m: rng.choice([-1.0, 0.0, 0.25, 1.0]) for m in legal}
        valid = rng.random() > 0.15
        rows.append(_valued(i, rng.choice(moves) if valid else "", values, valid=valid,
                            role=rng.choice(["player_0", "player_1"]),
                            adv=rng.choice([-1.0, 0.0, 0.5])))
    df = _frame(rows)
    for keep, unit in itertools.product((False, True), (False, True)):
        got = with_best_valued(df, keep, unit)
        want = with_best_valued_reference(df, keep, unit)
        assert got.drop("advantage").equals(want.drop("advantage"))
        assert got["advantage"].to_list() == pytest.approx(want["advantage"].to_list())


def test_best_valued_asks_for_the_values():
    from mars_core.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="train_actions best_valued .* set rollout.mc_rollouts"):
        load_config(None, ["algorithm.train_actions=best_valued"])
    cfg = load_config(None, ["algorithm.train_actions=best_valued", "rollout.mc_rollouts=4"])
    assert cfg.algorithm.train_actions == "best_valued"
    with pytest.raises(ConfigError, match="train_actions sampled_and_best .* set rollout.mc_rollouts"):
        load_config(None, ["algorithm.train_actions=sampled_and_best"])
    with pytest.raises(ConfigError, match="label_advantage applies to train_actions: "
                                          "best_valued or sampled_and_best only"):
        load_config(None, ["algorithm.label_advantage=unit"])
    cfg = load_config(None, ["algorithm.train_actions=best_valued", "rollout.mc_rollouts=4",
                             "algorithm.label_advantage=unit"])
    assert cfg.algorithm.label_advantage == "unit"


@pytest.mark.parametrize("mode", ["best_valued", "sampled_and_best"])
def test_the_stage_writes_best_valued_rows_the_trainer_reads_at_weight_one(mode, tmp_path,
                                                                           monkeypatch):
    """compute_advantages with train_actions: best_valued (after the monte_carlo estimator)
    writes the labelled rows; the trainer loads an added row with no behaviour log-probs (its
    importance weight is 1)."""
    from mars_core.config import dump_config, load_config
    from mars_core.run.layout import (BATCH_FILE, BUILD_BATCH, COMPUTE_ADVANTAGES, CONFIG_FILE,
                                      SAMPLES_FILE, stage_dir)
    from mars_core.training.trainer import load_samples
    from tasks import batching, stage as stage_module
    from tests.conftest import REPO
    from tests.unit.test_stage import _offline_run_stage

    run = tmp_path / "run"
    run.mkdir()
    cfg = load_config(REPO / "configs" / "smoke.yaml",
                      ["algorithm.estimator=monte_carlo", "rollout.mc_rollouts=4",
                       f"algorithm.train_actions={mode}", "algorithm.drop_zero_advantage=true"])
    (run / CONFIG_FILE).write_text(dump_config(cfg))
    monkeypatch.setattr(stage_module, "run_stage", _offline_run_stage)
    rows = [_valued(0, "<PASS>", {"<BET>": 1.0, "<PASS>": 0.0}),
            _valued(1, "<BET>", {"<BET>": 0.5, "<PASS>": 0.5})]
    rows = [{**r, "game_reward": 0.0} for r in rows]
    folder = stage_dir(run, 0, BUILD_BATCH)
    folder.mkdir(parents=True)
    _frame(rows).drop("advantage").write_parquet(folder / BATCH_FILE)
    metrics = batching.compute_advantages.fn(str(run), 0)
    path = stage_dir(run, 0, COMPUTE_ADVANTAGES) / SAMPLES_FILE
    samples = pl.read_parquet(path)
    # the tie (gap 0) is dropped; the bet trains in turn 0's state; the pass gets 0 and is
    # dropped (best_valued) or keeps its monte_carlo advantage 0 - 0.5 (sampled_and_best)
    assert metrics["batch/counterfactual_rows"] == 1.0
    own = [] if mode == "best_valued" else [([0], [7, 9], -0.5)]
    assert [(r["prompt_ids"], r["completion_ids"], pytest.approx(r["advantage"]))
            for r in samples.iter_rows(named=True)] == own + [([0], [7, 8], pytest.approx(0.5))]
    *_, loaded = load_samples(path)
    assert loaded.behaviour == () and loaded.completion_ids == (7, 8)
