"""The mirror update (algorithm.train_actions: mirror, issue 61): the closed-form target, the
rows a batch trains, the likelihood fit's fixed point, and the tabular ceiling in self-play."""
from __future__ import annotations

import math

import polars as pl
import pytest
import torch

from mars_core.advantages.mirror import (magnet_step, mmd_target, tabular_step,
                                         with_mirror_targets)
from mars_core.lab import selfplay
from mars_core.training.losses import aggregate, likelihood_loss
from mars_core.types import TURN_SCHEMA

REPLY = {"<BET>": [7, 8], "<PASS>": [7, 9]}


def test_the_target_is_the_closed_form():
    pi, q, rho = [0.2, 0.5, 0.3], [1.0, -0.5, 0.25], [0.6, 0.3, 0.1]
    alpha, eta = 0.5, 2.0
    raw = [(p * r ** (alpha * eta) * math.exp(eta * v)) ** (1 / (1 + alpha * eta))
           for p, v, r in zip(pi, q, rho)]
    assert mmd_target(pi, q, rho, alpha, eta) == pytest.approx([x / sum(raw) for x in raw])
    # without a magnet: multiplicative weights, pi exp(eta q) normalized
    plain = [p * math.exp(eta * v) for p, v in zip(pi, q)]
    assert mmd_target(pi, q, rho, 0.0, eta) == pytest.approx([x / sum(plain) for x in plain])
    # equal values: the policy moves toward the magnet only
    moved = mmd_target([0.9, 0.1], [0.3, 0.3], [0.5, 0.5], 1.0, 1.0)
    assert moved == pytest.approx([0.75, 0.25])
    assert mmd_target([1.0, 0.0], [0.0, 5.0], [0.5, 0.5], 0.5, 1.0) == [1.0, 0.0]
    with pytest.raises(ValueError, match="same, non-zero length"):
        mmd_target([0.5, 0.5], [1.0], [0.5, 0.5], 0.5, 1.0)


def test_the_magnet_follows_the_policy_at_its_rate():
    assert magnet_step([0.5, 0.5], [0.9, 0.1], 0.0) == [0.5, 0.5]
    assert magnet_step([0.5, 0.5], [0.9, 0.1], 1.0) == pytest.approx([0.9, 0.1])
    half = magnet_step([0.5, 0.5], [0.9, 0.1], 0.5)
    assert half == pytest.approx([0.75, 0.25])  # sqrt(.5 .9) : sqrt(.5 .1) = 3 : 1


def test_the_likelihood_fit_stops_at_the_target():
    """-sum_a target(a) log softmax(z)_a has zero gradient exactly at softmax(z) = target, and
    pushes toward it from either side (no ratio: it cannot overshoot)."""
    target = torch.tensor([0.3, 0.7])
    mask = torch.ones(2, 1)
    for start, sign in (([0.0, 0.0], 1), ([0.0, 3.0], -1)):  # 0.5 below, 0.95 above
        z = torch.tensor(start, requires_grad=True)
        loss = aggregate(likelihood_loss(torch.log_softmax(z, 0)[:, None], target, mask), mask,
                         "seq_mean_token_sum")
        loss.backward()
        assert sign * float(z.grad[1]) < 0  # the second action's logit moves toward 0.7
    z = torch.log(target).clone().requires_grad_(True)
    aggregate(likelihood_loss(torch.log_softmax(z, 0)[:, None], target, mask), mask,
              "seq_mean_token_sum").backward()
    assert torch.allclose(z.grad, torch.zeros(2), atol=1e-7)


def _turn(i, prompt, action, ret, logprob, role="player_0"):
    comp = REPLY[action]
    return {"turn_id": f"t{i}", "episode_id": f"e{i}", "game": "kuhn_poker", "player": 0,
            "role": role, "turn": 0, "reward": ret, "advantage": 0.0, "prompt_ids": prompt,
            "completion_ids": comp, "logprobs": [logprob, 0.0], "temperature": 1.0,
            "reply": f"r{i}", "action": action, "valid": True}


def _frame(rows):
    schema = {k: TURN_SCHEMA[k] for k in rows[0] if k in TURN_SCHEMA}
    return pl.DataFrame(rows, schema={**schema, "turn_id": pl.Utf8, "advantage": pl.Float64})


def test_a_batch_trains_each_state_s_answers_at_their_target():
    p_bet = 0.8
    rows = [_turn(0, [1, 2], "<BET>", 1.0, math.log(p_bet)),
            _turn(1, [1, 2], "<BET>", 2.0, math.log(p_bet)),
            _turn(2, [1, 2], "<PASS>", -1.0, math.log(1 - p_bet)),
            _turn(3, [1, 3], "<BET>", 1.0, math.log(0.5))]  # one action known: nothing
    out, memory, metrics = with_mirror_targets(_frame(rows), None, alpha=0.5, eta=1.0,
                                               magnet_rate=0.05)
    # one row per (state, action), from the state's first turn: pi from the recorded
    # log-probs, q the mean return of each action there, the magnet uniform
    want = mmd_target([1 - p_bet, p_bet], [-1.0, 1.5], [0.5, 0.5], 0.5, 1.0)
    got = {r["action"]: (r["advantage"], r["completion_ids"], r["turn_id"])
           for r in out.iter_rows(named=True)}
    assert got == {"<PASS>": (pytest.approx(want[0]), [7, 9], "t0"),
                   "<BET>": (pytest.approx(want[1]), [7, 8], "t0")}
    assert metrics["mirror/states"] == 1.0
    assert len(memory) == 2  # both states remembered, the second with its one action
    # the next batch samples <BET> only: <PASS> keeps its remembered value and gets what the
    # recorded probabilities leave; the magnet moved toward the last target
    rho = dict(next(iter(memory.values()))["rho"])
    assert rho["<BET>"] == pytest.approx(magnet_step([0.5, 0.5], want, 0.05)[1])
    again = [_turn(4, [1, 2], "<BET>", 0.0, math.log(0.9))]
    out2, memory2, _ = with_mirror_targets(_frame(again), memory, alpha=0.5, eta=1.0,
                                            magnet_rate=0.05)
    q_bet = (2 * 1.5 + 0.0) / 3
    want2 = mmd_target([0.1, 0.9], [-1.0, q_bet], [rho["<PASS>"], rho["<BET>"]], 0.5, 1.0)
    got2 = {r["action"]: r["advantage"] for r in out2.iter_rows(named=True)}
    assert got2 == {"<PASS>": pytest.approx(want2[0]), "<BET>": pytest.approx(want2[1])}


def test_tabular_step_moves_only_the_states_it_has_values_for():
    pi = {"a": [0.5, 0.5], "b": [0.5, 0.5]}
    nxt, rho = tabular_step(pi, {"a": [0.0, 1.0]}, {"a": [0.5, 0.5], "b": [0.5, 0.5]}, 0.0, 1.0)
    assert nxt["b"] == [0.5, 0.5] and nxt["a"][1] == pytest.approx(1 / (1 + math.exp(-1)))


def test_tabular_mmd_converges_in_kuhn_self_play_where_greedy_cycles():
    """The ceiling of the update: exact values, a magnet that follows the policy."""
    mmd = selfplay.run("kuhn_poker", "mmd", 60, episodes=None, alpha=1.0, eta=1.0,
                       magnet_rate=0.1)
    assert mmd.exploitability[0] == pytest.approx(11 / 24)
    assert max(mmd.exploitability[30:]) < 0.1 and mmd.exploitability[-1] < 0.06
    greedy = selfplay.run("kuhn_poker", "greedy", 30, episodes=None, lr=0.5)
    assert max(greedy.exploitability[15:]) > 0.15  # best responses keep swinging


def test_exact_action_values_match_the_kuhn_lab():
    from mars_core.lab import kuhn
    from mars_core.strength.exploitability import uniform

    q = selfplay.action_values("kuhn_poker", uniform("kuhn_poker"))
    lab = kuhn.action_values(kuhn.UNIFORM, kuhn.UNIFORM)
    for key, values in lab.items():
        ours = q[str(kuhn.RANKS.index(key[0])) + key[1:]]
        assert ours == pytest.approx(list(values))
