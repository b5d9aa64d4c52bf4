"""What a seat sees with `keep_history`: its whole conversation, its own reasoning included,
even under a chat template that drops earlier `<think>` blocks (Qwen3's does)."""
from __future__ import annotations

import copy

import pytest

from mars_core.engines.scripted import ScriptedEngine, legal_actions_in
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.types import SamplingParams

PARAMS = SamplingParams(max_new_tokens=64, stop=("</answer>",))
REASON = "Reasoning {n}: the centre is strong."

# A ChatML template that, like Qwen3's, keeps only the text after `</think>` in assistant turns
# that come before the last user message.
STRIPPING = (
    "{%- set ns = namespace(last=0) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- set content = m.content -%}"
    "{%- if m.role == 'assistant' and loop.index0 < ns.last and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}"
    "{{ '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")


def thinking_replies():
    """A thinking model's replies after the `<think>\\n` prefill: numbered reasoning, then a
    legal move."""
    count = [0]

    def reply(prompt):
        count[0] += 1
        action = legal_actions_in(prompt)[0]
        return f"{REASON.format(n=count[0])}\n</think>\n<answer>{action}</answer>"

    return reply


def play(tokenizer, prefill, replies):
    builder = PromptBuilder(tokenizer, prefill, keep_history=True)
    ep, = play_episodes([EpisodeSpec("e", "tic_tac_toe", 0, ("policy", "policy"))],
                        ScriptedEngine(tokenizer, replies), builder, PARAMS, progress=False)
    return builder, ep


@pytest.fixture
def stripping_tokenizer(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = STRIPPING
    return tok


def test_a_seats_prompts_extend_each_other_token_by_token(tokenizer):
    _, ep = play(tokenizer, "answer", lambda p: f"{legal_actions_in(p)[-1]}</answer>")
    assert len(ep.turns) >= 5
    for seat in (0, 1):
        mine = [t for t in ep.turns if t.player == seat]
        for before, after in zip(mine, mine[1:]):
            conversation = before.prompt_ids + before.completion_ids
            assert after.prompt_ids[:len(conversation)] == conversation
            assert len(after.prompt_ids) > len(conversation)


def test_history_reads_as_the_template_writes_the_conversation(tokenizer):
    """For a template that keeps every turn (SmolLM2's ChatML), the grown prompt is the
    template's rendering of the whole conversation."""
    builder, ep = play(tokenizer, "answer", lambda p: f"{legal_actions_in(p)[0]}</answer>")
    mine = [t for t in ep.turns if t.player == 0]
    messages = _conversation(mine)
    want = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(mine[-1].prompt_ids) == want + builder.prefill


def _rules(seat):
    from mars_core.games.registry import make_game

    return make_game("tic_tac_toe").rules(seat)


def _conversation(mine):
    """Seat 0's turns as chat messages: the rules, each observation and reply, the last
    observation."""
    messages = [{"role": "system", "content": _rules(0)}]
    for t in mine[:-1]:
        messages += [{"role": "user", "content": t.observation},
                     {"role": "assistant", "content": t.reply}]
    return messages + [{"role": "user", "content": mine[-1].observation}]


def test_earlier_reasoning_stays_in_the_conversation(stripping_tokenizer):
    tok = stripping_tokenizer
    _, ep = play(tok, "think", thinking_replies())
    mine = [t for t in ep.turns if t.player == 0]
    assert len(mine) >= 3
    last = tok.decode(mine[-1].prompt_ids)
    for t in mine[:-1]:
        assert t.reply.startswith("<think>\n") and "</think>" in t.reply
        assert t.reply in last  # the whole reply, reasoning and answer, as the model wrote it
    assert last.endswith("<|im_start|>assistant\n<think>\n")
    # the template itself would have dropped it: what keep_history guards against
    messages = _conversation(mine)
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert "Reasoning 1" not in rendered and "Reasoning 1" in last


def test_without_history_a_prompt_is_the_rules_and_the_state(tokenizer):
    builder = PromptBuilder(tokenizer, "answer", keep_history=False)
    ep, = play_episodes([EpisodeSpec("e", "tic_tac_toe", 0, ("policy", "policy"))],
                        ScriptedEngine(tokenizer, lambda p: f"{legal_actions_in(p)[0]}</answer>"),
                        builder, PARAMS, progress=False)
    for t in ep.turns:
        messages = [{"role": "system", "content": _rules(t.player)},
                    {"role": "user", "content": t.observation}]
        assert list(t.prompt_ids) == builder.prompt_ids(messages)
