"""The Action Validator: the one gate in front of every game step (SPEC section 5, step 1).

Every reply, the model's or a bot's, in every game (OpenSpiel and TextArena alike), passes
three checks before anything reaches the game engine:

1. the reply itself: not cut off at the token limit, not a prompt that left no room;
2. the reasoning template: `reasoning <answer>ACTION</answer>` and nothing after it
   (`games.base.extract_answer`);
3. the action: its format and the game's rules for the player to move
   (`GameAdapter.check_action`: Blotto sums to 20 over A/B/C, a Codenames clue is one word
   that is no board word nor part of one, an IPD decision names real opponents, ...).

Failing 1, 2 or the format part of 3 is a `parsing_failure`; failing the rules is an
`invalid_action`. Only the extracted ACTION, never the reasoning, is passed to the game. The
validator never raises on any reply and never changes the game state.
"""
from __future__ import annotations

from typing import Any

from mars_core.games.base import PARSING_FAILURE, GameAdapter, Parsed, extract_answer
from mars_core.vocab import FinishReason


def validate(adapter: GameAdapter, state: Any, reply: str,
             finish_reason: FinishReason = FinishReason.STOP,
             max_new_tokens: int | None = None) -> Parsed:
    """`Parsed(action)` for a playable reply, else `Parsed(None, error_type, detail)`. The
    detail is for people; what decides (here and in the arena) is `finish_reason`."""
    if finish_reason == FinishReason.CONTEXT_OVERFLOW:
        return Parsed(None, PARSING_FAILURE, "context overflow: the prompt left no room to reply")
    if finish_reason == FinishReason.LENGTH:
        limit = f" of {max_new_tokens} tokens" if max_new_tokens else ""
        return Parsed(None, PARSING_FAILURE, f"truncated: the reply hit the limit{limit}")
    got = extract_answer(reply)
    if got.action is None:
        return got
    return adapter.check_action(state, got.action)
