"""Self-play updates on a table policy: the ceiling of an update, without a language model.

A policy is a table (OpenSpiel information-state key -> probabilities over the sorted legal
actions, `mars_core.strength.exploitability`'s form). Each iteration measures the action values
of every state the way the pipeline's batch does (`sampled_values`: `episodes` self-play games,
each (state, action)'s mean final return, remembered over `window` measurements), or exactly
(`action_values`: expectations over the whole tree), steps the table with an update and reads
its exact exploitability. Seconds on a CPU; `bench/selfplay_tabular.py` prints the curves, the
lab page draws them beside the language model's (issue 61).

Updates (`UPDATES`): `mmd` (Magnetic Mirror Descent, `mars_core.advantages.mirror`), `greedy`
(each visited state moves toward its best measured action: the project's greedy labels, a
best response), `pg` (a softmax policy gradient with a per-state baseline: logits += lr x
pi(a) (q(a) - V)).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from mars_core.advantages.mirror import tabular_step
from mars_core.strength.exploitability import _game, decisions, exploitability, uniform

UPDATES = ("mmd", "greedy", "pg")


def action_values(game: str, probs: dict[str, list[float]]) -> dict[str, list[float]]:
    """Every information state's expected final return of each legal action for the seat that
    decides there, both seats playing `probs` (histories weighed by chance and the other
    seat's reach: the value conditional on reaching the state)."""
    g = _game(game)
    q: dict[str, list[float]] = {}
    w: dict[str, float] = {}

    def walk(s, other_reach: list[float]) -> list[float]:
        if s.is_terminal():
            return s.returns()
        if s.is_chance_node():
            total = [0.0] * g.num_players()
            for a, p in s.chance_outcomes():
                v = walk(s.child(a), [r * p for r in other_reach])
                total = [t + p * x for t, x in zip(total, v)]
            return total
        p = s.current_player()
        key = s.information_state_string(p)
        pi = probs[key]
        legal = sorted(s.legal_actions(p))
        total = [0.0] * g.num_players()
        weight = other_reach[p]
        acc = q.setdefault(key, [0.0] * len(legal))
        for k, a in enumerate(legal):
            reach = [r if j == p else r * pi[k] for j, r in enumerate(other_reach)]
            v = walk(s.child(a), reach)
            acc[k] += weight * v[p]
            total = [t + pi[k] * x for t, x in zip(total, v)]
        w[key] = w.get(key, 0.0) + weight
        return total

    walk(g.new_initial_state(), [1.0] * g.num_players())
    return {k: [x / w[k] for x in v] if w[k] > 0 else [0.0] * len(v) for k, v in q.items()}


def sampled_values(game: str, probs: dict[str, list[float]], episodes: int,
                   rng: random.Random) -> dict[str, dict[int, tuple[float, int]]]:
    """(sum of final returns, count) per state and action index taken, over `episodes` games
    of self-play sampled from `probs`: what one batch of the pipeline measures."""
    g = _game(game)
    out: dict[str, dict[int, list]] = {}
    for _ in range(episodes):
        s = g.new_initial_state()
        visits = []
        while not s.is_terminal():
            if s.is_chance_node():
                actions, weights = zip(*s.chance_outcomes())
                s.apply_action(rng.choices(actions, weights)[0])
                continue
            p = s.current_player()
            key = s.information_state_string(p)
            legal = sorted(s.legal_actions(p))
            k = rng.choices(range(len(legal)), probs[key])[0]
            visits.append((key, p, k))
            s.apply_action(legal[k])
        returns = s.returns()
        for key, p, k in visits:
            cell = out.setdefault(key, {}).setdefault(k, [0.0, 0])
            cell[0] += returns[p]
            cell[1] += 1
    return {key: {k: (v[0], v[1]) for k, v in acts.items()} for key, acts in out.items()}


@dataclass
class Curve:
    game: str
    update: str
    settings: dict
    exploitability: list[float] = field(default_factory=list)  # at the start, then per step


def _greedy(pi: list[float], q: list[float], lr: float) -> list[float]:
    top = max(range(len(q)), key=lambda k: q[k])
    return [(1 - lr) * p + lr * (k == top) for k, p in enumerate(pi)]


def _pg(pi: list[float], q: list[float], lr: float) -> list[float]:
    v = sum(p * x for p, x in zip(pi, q))
    logits = [math.log(max(p, 1e-12)) + lr * p * (x - v) for p, x in zip(pi, q)]
    top = max(logits)
    e = [math.exp(x - top) for x in logits]
    return [x / sum(e) for x in e]


def run(game: str, update: str = "mmd", iterations: int = 100, *, episodes: int | None = 256,
        alpha: float = 0.1, eta: float = 1.0, magnet_rate: float = 0.0, lr: float = 0.5,
        window: int = 64, seed: int = 0, start: dict | None = None) -> Curve:
    """`iterations` self-play updates of a table from `start` (default uniform), values from
    `episodes` sampled games an iteration (None: exact); the exploitability after each."""
    if update not in UPDATES:
        raise ValueError(f"unknown tabular update {update!r}; choose one of: {', '.join(UPDATES)}")
    rng = random.Random(seed)
    pi = {k: list(v) for k, v in (start or uniform(game)).items()}
    magnet = uniform(game)
    memory: dict[str, dict[int, list[float]]] = {}
    curve = Curve(game, update, {"episodes": episodes, "alpha": alpha, "eta": eta,
                                 "magnet_rate": magnet_rate, "lr": lr, "window": window,
                                 "seed": seed})
    curve.exploitability.append(exploitability(game, pi)["exploitability"])
    for _ in range(iterations):
        if episodes is None:
            q = action_values(game, pi)
        else:
            q = {}
            for key, acts in sampled_values(game, pi, episodes, rng).items():
                mem = memory.setdefault(key, {})
                for k, (total, n) in acts.items():
                    old = mem.get(k)
                    n_old = min(old[1], window) if old else 0
                    mean = total / n
                    mem[k] = [(n_old * old[0] + n * mean) / (n_old + n) if old else mean,
                              n_old + n]
                if len(mem) < 2:
                    continue
                v = sum(m[0] * m[1] for m in mem.values()) / sum(m[1] for m in mem.values())
                q[key] = [mem[k][0] if k in mem else v for k in range(len(pi[key]))]
        if update == "mmd":
            pi, magnet = tabular_step(pi, q, magnet, alpha, eta, magnet_rate)
        else:
            step = _greedy if update == "greedy" else _pg
            pi = {**pi, **{k: step(pi[k], v, lr) for k, v in q.items()}}
        curve.exploitability.append(exploitability(game, pi)["exploitability"])
    return curve


__all__ = ["UPDATES", "Curve", "action_values", "decisions", "run", "sampled_values"]
