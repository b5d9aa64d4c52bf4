"""Tic-Tac-Toe's worst case for a policy: the exact best response to it (issue 61).

The policy is read where it can be reached: from the empty board, every move of the other
seat (the best response may play anything) and every move of the policy's own that it makes
with probability at least `prune`; at each of its positions the prompt is built as the
rollouts build it (the seat's rules and observation in the run's layout, the other seat's
last move) and every legal answer scored (`exploitability.answer_logprobs`, at the sampling
temperature, renormalized over the legal answers). Then, bottom-up, the other seat takes the
move worst for the policy and the policy's moves are averaged by its probabilities: the
policy's worst-case expected score (1 a win, 0 a draw, -1 a loss), per seat. The moves below
`prune` are counted as losses, so the figure is a lower bound, exact when nothing was pruned
(the pruned mass is reported). A near-uniform policy reaches about 6,600 positions of its seat
(about 50 minutes a reading on 2 CPU cores): `max_reads` refuses it by name first.

`worst_case_of(policy, seat)` does the search for any policy given as a function (position
-> probabilities), which is how a table policy or minimax play is checked; `read_worst_case`
reads a language model into it. Pure library: no Prefect, no MLflow.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

GAME = "tic_tac_toe"


@dataclass(frozen=True)
class Position:
    """A position where the policy moves: the pyspiel state, the other seat's last move (as
    the observation reports it) and the legal answers in action-id order."""

    state: object
    moves_since: tuple[tuple[int, str], ...]
    actions: tuple[int, ...]
    answers: tuple[str, ...]

    def key(self, last_move_shown: bool = True) -> tuple:
        """What the policy's prompt depends on: the board, and the other seat's last move
        where the layout shows it (the compact one does not)."""
        return (str(self.state), self.moves_since if last_move_shown else ())


def _position(adapter, state, seat: int, moves_since) -> Position:
    from mars_core.games.openspiel_games import _Seeded

    ids = tuple(sorted(state.legal_actions()))
    view = _Seeded(state, random.Random(0))
    return Position(state, tuple(moves_since), ids,
                    tuple(adapter.action_string(view, seat, a) for a in ids))


def worst_case_of(policy: Callable[[list[Position]], list[list[float]]], seat: int,
                  prune: float = 1e-3, max_reads: int | None = None,
                  last_move_shown: bool = True) -> dict:
    """The policy's worst-case expected score in `seat` (`worst_case`), the positions read
    (`reads`) and the probability pruned on the way (`pruned`: an upper bound on the mass
    counted as lost). `policy(positions)` gives each position's probabilities (action-id
    order); it is called once a depth with every new position of that depth (positions whose
    prompts are the same, by `last_move_shown`, are read once)."""
    from mars_core.games.registry import make_game

    adapter = make_game(GAME)
    probs: dict[tuple, list[float]] = {}

    def policy_moves(state, since) -> list[tuple[int, float]]:
        """The policy's moves of probability >= prune (read before this is asked)."""
        p = _position(adapter, state, seat, since)
        return [(a, q) for a, q in zip(p.actions, probs[p.key(last_move_shown)]) if q >= prune]

    def children(state, since):
        """(action, child, the moves its mover will have seen since its last turn)."""
        mover = state.current_player()
        if mover == seat:
            return [(a, state.child(a), since) for a, _ in policy_moves(state, since)]
        return [(a, state.child(a), ((mover, adapter.action_string(None, mover, a)),))
                for a in state.legal_actions()]

    level = [(adapter.game.new_initial_state(), ())]
    while level:  # breadth first: each depth's new positions read in one call
        fresh: dict[tuple, Position] = {}
        for state, since in level:
            if not state.is_terminal() and state.current_player() == seat:
                p = _position(adapter, state, seat, since)
                if p.key(last_move_shown) not in probs:
                    fresh.setdefault(p.key(last_move_shown), p)
        if max_reads is not None and len(probs) + len(fresh) > max_reads:
            raise ValueError(f"the policy reaches more than {max_reads} positions of seat {seat} "
                             f"with moves of probability >= {prune} (a near-uniform policy "
                             "reaches about 6,600): raise prune or max_reads")
        for key, row in zip(fresh, policy(list(fresh.values())) if fresh else ()):
            probs[key] = list(row)
        nxt: dict[tuple, tuple] = {}
        for state, since in level:
            if not state.is_terminal():
                for _, child, after in children(state, since):
                    nxt.setdefault((str(child), after), (child, after))
        level = list(nxt.values())
    values: dict[tuple, float] = {}
    pruned = [0.0]

    def value(state, since) -> float:
        key = (str(state), since)
        if key not in values:
            if state.is_terminal():
                values[key] = state.returns()[seat]
            elif state.current_player() != seat:  # the best response: the policy's worst
                values[key] = min(value(c, after) for _, c, after in children(state, since))
            else:  # the policy's moves by their probabilities; the pruned ones lost
                kept = dict(policy_moves(state, since))
                lost = 1.0 - sum(kept.values())
                pruned[0] = max(pruned[0], lost)
                values[key] = sum(kept[a] * value(c, after)
                                  for a, c, after in children(state, since)) - lost
        return values[key]

    return {"seat": seat, "worst_case": value(adapter.game.new_initial_state(), ()),
            "reads": len(probs), "pruned": pruned[0], "prune": prune}


def read_worst_case(model, tokenizer, builder, *, temperature: float = 1.0, prune: float = 1e-3,
                    autocast: bool = False, max_reads: int = 1500, chunk: int = 64,
                    max_tokens: int | None = None) -> dict:
    """The language model's worst case in both seats, read in the layout of `builder` (a
    `PromptBuilder` that answers at once, one turn: as `exploitability.read_policy`):
    `seats` (each seat's `worst_case_of` figures) and `worst_case`, their mean, also as a
    normalized score (0-100, 50 a draw)."""
    import torch

    from mars_core.games.registry import make_game
    from mars_core.rollout.play import PREFILLS
    from mars_core.strength.exploitability import (MAX_SCORED_TOKENS, answer_logprobs,
                                                   scoring_chunks)

    if builder.prefill != PREFILLS["answer"] or builder.keep_history:
        raise ValueError("the worst case reads a policy that answers at once in one turn "
                         "(prefill: answer, keep_history: false)")
    adapter = make_game(GAME)

    def policy(positions: list[Position]) -> list[list[float]]:
        from mars_core.games.openspiel_games import _Seeded

        prompts = []
        for p in positions:
            seat = p.state.current_player()
            view = _Seeded(p.state, random.Random(0))
            prompts.append(builder.prompt_ids([
                {"role": "system", "content": adapter.rules_for(seat, builder.style)},
                {"role": "user", "content": adapter.observation_for(
                    view, seat, list(p.moves_since), builder.style)}]))
        answers = [[tokenizer.encode(a + "</answer>", add_special_tokens=False)
                    for a in p.answers] for p in positions]
        out = []
        for r in scoring_chunks(prompts, answers, chunk, max_tokens or MAX_SCORED_TOKENS):
            with torch.no_grad():
                lp = answer_logprobs(model, prompts[r.start:r.stop], answers[r.start:r.stop],
                                     tokenizer.pad_token_id, autocast, temperature)
            out += [torch.softmax(row[:len(p.actions)].double(), 0).tolist()
                    for p, row in zip(positions[r.start:r.stop], lp)]
        return out

    seats = [worst_case_of(policy, s, prune, max_reads, builder.style != "compact")
             for s in (0, 1)]
    mean = sum(s["worst_case"] for s in seats) / 2
    return {"game": GAME, "seats": seats, "worst_case": mean,
            "normalized": 50 * (mean + 1), "temperature": temperature}
