"""Magnetic Mirror Descent for self-play (Sokota et al., ICLR 2023; SPEC section 7, issue 61).

At each information state the next policy is the closed form

    pi_{t+1}(a)  ~  [pi_t(a) rho(a)^(alpha eta) exp(eta q_t(a))]^(1 / (1 + alpha eta))

with q_t the state's action values under the current policy (both seats), rho the magnet and
eta the step. alpha > 0 makes the last iterate converge (to the equilibrium regularized toward
rho); alpha = 0 is the plain mirror step, which cycles in games with mixed equilibria. A magnet
that follows the policy slowly, rho <- rho^(1 - e) pi_{t+1}^e normalized, moves that fixed point
toward the Nash equilibrium itself.

`with_mirror_targets` is the update's batch side (`algorithm.train_actions: mirror`): from a
self-play batch it measures q_t per visited state (the mean return-to-go of the turns that took
each action there, blended with the values remembered from earlier batches, as the greedy
memory does), reads pi_t from the behaviour log-probs the engine recorded, computes the target
and emits one row per (state, action) whose `advantage` is the target probability. The trainer
then fits those rows by weighted log-likelihood (`mars_core.training.losses`, surrogate
"likelihood"): sum_a target(a) log pi(a | s), whose maximum over the legal answers is pi = target,
so a step cannot overshoot the target the way a policy gradient with a fixed advantage does.
`tabular_step` is the same update on a table (the lab's ceiling).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from mars_core.advantages.all_actions import (_label_completions, _return_to_go, _state_id,
                                              COUNTERFACTUAL)

MIRROR_MEMORY = "mirror_memory"  # the memory's key in the state saved with a checkpoint
MIN_PROB = 1e-4  # the smallest probability an action the batch never sampled is given


def mmd_target(pi: Sequence[float], q: Sequence[float], magnet: Sequence[float], alpha: float,
               eta: float) -> list[float]:
    """The closed-form MMD step at one state: pi_{t+1}(a) proportional to
    [pi(a) rho(a)^(alpha eta) exp(eta q(a))]^(1 / (1 + alpha eta)), computed in log space.
    An action with pi or rho 0 keeps probability 0 (it could not be reached by the step)."""
    if not len(pi) == len(q) == len(magnet) > 0:
        raise ValueError("mmd_target: pi, q and magnet need the same, non-zero length")
    if alpha < 0 or eta <= 0:
        raise ValueError(f"mmd_target: alpha >= 0 and eta > 0 (got {alpha}, {eta})")
    scale = 1.0 / (1.0 + alpha * eta)
    logits = []
    for p, v, r in zip(pi, q, magnet):
        if p <= 0 or (alpha > 0 and r <= 0):
            logits.append(-math.inf)
            continue
        magnet_term = alpha * eta * math.log(r) if alpha > 0 else 0.0
        logits.append(scale * (math.log(p) + magnet_term + eta * v))
    top = max(logits)
    if top == -math.inf:
        raise ValueError("mmd_target: no action has probability above 0")
    w = [math.exp(x - top) for x in logits]
    total = sum(w)
    return [x / total for x in w]


def magnet_step(magnet: Sequence[float], policy: Sequence[float], rate: float) -> list[float]:
    """rho^(1 - rate) * policy^rate, normalized (rate 0: the magnet stays)."""
    if rate == 0:
        return list(magnet)
    w = [(r ** (1 - rate)) * (p ** rate) for r, p in zip(magnet, policy)]
    total = sum(w)
    return [x / total for x in w] if total > 0 else list(magnet)


def tabular_step(pi: dict[str, list[float]], q: dict[str, list[float]],
                 magnet: dict[str, list[float]], alpha: float, eta: float,
                 magnet_rate: float = 0.0) -> tuple[dict, dict]:
    """(next policy, next magnet) of a table policy (key -> probabilities), every state with
    values in `q` stepped by `mmd_target`, the others kept."""
    nxt = dict(pi)
    rho = dict(magnet)
    for key, values in q.items():
        nxt[key] = mmd_target(pi[key], values, magnet[key], alpha, eta)
        rho[key] = magnet_step(magnet[key], nxt[key], magnet_rate)
    return nxt, rho


def _completion_prob(logprobs: Sequence[float] | None) -> float | None:
    return math.exp(sum(logprobs)) if logprobs else None


def with_mirror_targets(df: pl.DataFrame, memory: dict | None, *, alpha: float, eta: float,
                        magnet_rate: float = 0.0, window: int = 64,
                        max_states: int | None = None) -> tuple[pl.DataFrame, dict, dict]:
    """(the rows to train, the memory after this batch, metrics) of a batch of turns.

    A state is what the policy sees (game, role, prompt tokens). In each state the batch
    visited: q(a) is the running mean (old count capped at `window`) of the return-to-go of
    the valid turns that took `a` there, in this batch and the remembered ones; an action seen
    in an earlier batch only keeps its remembered value. pi_t(a) is the probability the engine
    recorded for the completion sampled for `a` (the sum over the distinct completions seen for
    it); an action the batch did not sample shares what is left (at least `MIN_PROB`); the
    probabilities are renormalized over the state's known actions. The magnet starts uniform
    over them and follows the target at `magnet_rate`. One row per (state, known action): the
    state's first turn with that action's most sampled completion (else the remembered one, else
    the batch's most sampled one by the same game and role) and `advantage` = the target
    probability. A state where one action is known trains nothing. Invalid turns add nothing:
    fitting the legal answers' targets takes their probability away.

    The memory (state id -> {"q": {action: [value, count, completion]}, "rho": {action: p}})
    keeps its states in the order last visited, at most `max_states` of them."""
    memory = {s: {"q": {a: list(v) for a, v in m["q"].items()}, "rho": dict(m["rho"])}
              for s, m in (memory or {}).items()}
    rows = df.to_dicts()
    rtg = _return_to_go(df) if rows else []
    labels = _label_completions(df) if rows else {}
    state = [_state_id(r) for r in rows]
    first: dict[str, int] = {}
    taken: dict[str, dict[str, list[int]]] = {}
    for i, r in enumerate(rows):
        first.setdefault(state[i], i)
        if r["valid"] and r["action"] and r["completion_ids"]:
            taken.setdefault(state[i], {}).setdefault(r["action"], []).append(i)
    out, kl_sum, gap_sum, trained = [], 0.0, 0.0, 0
    for s, i0 in first.items():
        m = memory.pop(s, {"q": {}, "rho": {}})
        memory[s] = m  # the most recently visited
        probs: dict[str, float] = {}
        comps: dict[str, tuple[list[int], list[float], float]] = {}
        visits = sum(len(ix) for ix in taken.get(s, {}).values())  # valid turns in the state
        for action, ix in taken.get(s, {}).items():
            mean = sum(rtg[i] for i in ix) / len(ix)
            old = m["q"].get(action)
            n_old = min(old[1], window) if old else 0
            value = (n_old * old[0] + len(ix) * mean) / (n_old + len(ix)) if old else mean
            by: dict[tuple, list[int]] = {}
            for i in ix:
                by.setdefault(tuple(rows[i]["completion_ids"]), []).append(i)
            src = rows[min((-len(c), c[0]) for c in by.values())[1]]
            m["q"][action] = [value, n_old + len(ix), list(src["completion_ids"])]
            seen = [p for p in (_completion_prob(rows[c[0]]["logprobs"]) for c in by.values())
                    if p is not None]  # recorded: the engine's; else the batch's frequency
            probs[action] = sum(seen) if seen else len(ix) / visits
            comps[action] = (list(src["completion_ids"]), list(src["logprobs"] or []),
                             src["temperature"])
        actions = sorted(m["q"])
        if len(actions) < 2:
            continue
        rest = [a for a in actions if a not in probs]
        if rest:
            left = max(0.0, 1.0 - sum(probs.values())) / len(rest)
            for a in rest:
                probs[a] = max(left, MIN_PROB)
        total = sum(probs.values())
        pi = [probs[a] / total for a in actions]
        q = [m["q"][a][0] for a in actions]
        rho_old = m["rho"]
        if set(rho_old) != set(actions):  # a new action: the magnet starts again, uniform
            rho = [1 / len(actions)] * len(actions)
        else:
            rho = [rho_old[a] for a in actions]
        target = mmd_target(pi, q, rho, alpha, eta)
        m["rho"] = dict(zip(actions, magnet_step(rho, target, magnet_rate)))
        kl_sum += sum(t * math.log(t / p) for t, p in zip(target, pi) if t > 0)
        gap_sum += max(q) - min(q)
        trained += 1
        base = rows[i0]
        for a, t in zip(actions, target):
            if a in comps:
                completion, logprobs, temperature = comps[a]
            else:
                completion = m["q"][a][2] or labels.get((base["game"], base["role"], a), [])
                logprobs, temperature = [], base["temperature"]
            if not completion:
                continue
            out.append({**base, "completion_ids": completion, "logprobs": logprobs,
                        "temperature": temperature, "reply": "", "action": a,
                        "advantage": t, COUNTERFACTUAL: a != base["action"]})
    if max_states is not None and len(memory) > max_states:
        memory = dict(list(memory.items())[len(memory) - max_states:])
    frame = pl.DataFrame(out, schema={**df.schema, COUNTERFACTUAL: pl.Boolean})
    metrics = {"mirror/states": float(trained),
               "mirror/target_kl": kl_sum / trained if trained else 0.0,
               "mirror/value_gap": gap_sum / trained if trained else 0.0}
    return frame, memory, metrics

