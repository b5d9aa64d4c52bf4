"""MAD, AutoGen-style and single-agent control flow with a scripted chat engine: who speaks
when, when a question stops, what is graded, and that a failed call is a wrong answer."""
from __future__ import annotations

import pytest

from eval.benchmarks import Question
from eval.systems import MAX_ROUNDS, run_system
from eval.verdict import parse_verdict
from mars_core.engines.chat import ChatParams, ChatReply

Q = Question("gsm8k", "q1", "Janet has 16 eggs and uses 7. She sells the rest at $2. Dollars?",
             "18")
CHOICE = Question("aqua", "q2", "Pick one\n\nA) 1\nB) 2\nC) 3", "B", ("1", "2", "3"))


def agent_of(messages) -> str:
    """Which agent a conversation belongs to, read from its system prompt."""
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    for needle, agent in (("affirmative side", "affirmative"), ("negative side", "negative"),
                          ("moderator of a debate", "moderator"), ("judge of a debate", "judge"),
                          ("helpful AI assistant", "assistant"), ("checking an assistant",
                                                                   "user_proxy")):
        if needle in system:
            return agent
    return "single"


class Scripted:
    """A chat engine whose replies come from `script[agent]` (a string, a ChatReply, or a
    list consumed one per call); it records every batch it was sent."""

    def __init__(self, script: dict):
        self.script = {k: list(v) if isinstance(v, list) else v for k, v in script.items()}
        self.batches: list[list[str]] = []
        self.conversations: list[list[dict]] = []

    def chat(self, conversations, params):
        agents = [agent_of(c) for c in conversations]
        self.batches.append(agents)
        self.conversations += conversations
        out = []
        for agent in agents:
            reply = self.script[agent]
            if isinstance(reply, list):
                reply = reply.pop(0)
            out.append(reply if isinstance(reply, ChatReply) else ChatReply(reply, 10, 5))
        return out


def run(name, script, questions=(Q,)):
    engine = Scripted(script)
    return run_system(name, list(questions), engine, ChatParams(max_new_tokens=64)), engine


def test_single_agent_is_one_call_and_graded():
    [r], engine = run("single", {"single": "16 - 7 = 9 eggs, 9 x 2 = \\boxed{18}"})
    assert r.correct and r.calls == 1 and r.stop == "answered"
    assert r.prompt_tokens == 10 and r.completion_tokens == 5 and r.extracted == "18"


def test_mad_moderator_settles_in_round_one():
    [r], engine = run("mad", {
        "affirmative": "\\boxed{18}", "negative": "\\boxed{20}",
        "moderator": '{"preference": "yes", "supported_side": "affirmative", "reason": "ok", '
                     '"answer": "18"}'})
    assert [b[0] for b in engine.batches] == ["affirmative", "negative", "moderator"]
    assert r.stop == "moderator" and r.rounds == 1 and r.calls == 3 and r.correct


def test_mad_never_settles_and_the_judge_decides():
    [r], engine = run("mad", {
        "affirmative": "\\boxed{18}", "negative": "\\boxed{20}",
        "moderator": '{"preference": "no", "supported_side": "", "answer": ""}',
        "judge": "The negative side is right: \\boxed{20}"})
    agents = [b[0] for b in engine.batches]
    assert agents == ["affirmative", "negative", "moderator"] * MAX_ROUNDS + ["judge"]
    assert r.stop == "judge" and r.calls == 10 and not r.correct
    # the judge saw every round; later rounds relayed the other side's words
    judge_prompt = engine.conversations[-1][-1]["content"]
    assert all(f"Round {k}" in judge_prompt for k in (1, 2, 3))
    assert "The negative side argued:\n\\boxed{20}" in engine.conversations[3][-1]["content"]


def test_mad_malformed_moderator_json_means_the_debate_goes_on():
    [r], engine = run("mad", {
        "affirmative": "\\boxed{18}", "negative": "\\boxed{20}",
        "moderator": ["{preference: yes, side: affirm", "I cannot decide.", "```json\n{oops"],
        "judge": "\\boxed{18}"})
    assert r.stop == "judge" and r.calls == 10 and r.correct


def test_mad_side_without_answer_takes_that_sides_reply():
    [r], _ = run("mad", {
        "affirmative": "I say \\boxed{18}", "negative": "I say \\boxed{20}",
        "moderator": ["```json\n{'preference': 'no'}\n```",
                      "<think>hmm</think>{\"Whether there is a preference\": \"Yes\", "
                      "\"Supported Side\": \"Negative\", \"debate_answer\": \"\"}"]})
    assert r.stop == "moderator" and r.rounds == 2 and r.prediction == "I say \\boxed{20}"
    assert not r.correct


def test_reasoning_blocks_are_not_relayed():
    _, engine = run("mad", {
        "affirmative": "<think>secret plan</think>\\boxed{18}", "negative": "\\boxed{20}",
        "moderator": '{"preference": "yes", "supported_side": "affirmative", "answer": "18"}'})
    relayed = engine.conversations[1][-1]["content"]
    assert "secret plan" not in relayed and "\\boxed{18}" in relayed


def test_autogen_terminate_in_the_first_reply():
    [r], engine = run("autogen", {"assistant": "9 x 2 = \\boxed{18}. TERMINATE"})
    assert r.calls == 1 and r.stop == "terminate" and r.correct
    assert "TERMINATE" not in r.prediction


def test_autogen_user_proxy_terminates_or_exchanges_run_out():
    [r], engine = run("autogen", {"assistant": ["\\boxed{20}", "fixed: \\boxed{18}"],
                                  "user_proxy": ["You forgot the eggs she uses.", "TERMINATE"]})
    assert [b[0] for b in engine.batches] == ["assistant", "user_proxy"] * 2
    assert r.stop == "terminate" and r.rounds == 2 and r.correct
    # the feedback reached the assistant as the user's next message
    assert engine.conversations[2][-1] == {"role": "user",
                                           "content": "You forgot the eggs she uses."}
    [r], engine = run("autogen", {"assistant": ["\\boxed{18}", "let me think", "still thinking"],
                                  "user_proxy": "Check again."})
    assert r.calls == 5 and r.stop == "max_exchanges" and r.rounds == 3
    assert r.prediction == "\\boxed{18}" and r.correct  # the last reply that states an answer


@pytest.mark.parametrize("system,agent", [("single", "single"), ("mad", "negative"),
                                          ("autogen", "user_proxy")])
def test_engine_errors_count_as_wrong_and_others_continue(system, agent):
    script = {"single": "\\boxed{18}", "affirmative": "\\boxed{18}",
              "negative": "\\boxed{18}", "moderator": '{"preference": "yes", '
              '"supported_side": "affirmative", "answer": "18"}', "assistant": "\\boxed{18}",
              "user_proxy": "TERMINATE", "judge": "\\boxed{18}"}
    script[agent] = [ChatReply("", 0, 0, "error", "HTTP 500: boom"), *[script[agent]] * 20]
    results, _ = run(system, script, [Q, Q])
    bad, good = results
    assert not bad.correct and bad.stop == "error" and bad.errors[0].endswith("HTTP 500: boom")
    assert good.correct and not good.errors


def test_questions_are_batched_across_the_system():
    questions = [Q, CHOICE, Q, CHOICE]
    results, engine = run("autogen", {"assistant": ["\\boxed{18} TERMINATE", "(B) TERMINATE",
                                                    "\\boxed{7}", "\\boxed{A}"] + ["x"] * 8,
                                      "user_proxy": "TERMINATE"}, questions)
    assert engine.batches[0] == ["assistant"] * 4  # all questions' first calls in one batch
    assert engine.batches[1] == ["user_proxy"] * 2  # only the two still open
    assert [r.correct for r in results] == [True, True, False, False]


@pytest.mark.parametrize("reply,settled,side,answer", [
    ('{"preference": "yes", "supported_side": "negative", "answer": "20"}', True, "negative",
     "20"),
    ("Sure!\n```json\n{'preference': 'Yes', 'supported_side': 'Affirmative', 'answer': 18,}\n```",
     True, "affirmative", "18"),
    ('{"preference": True, "supported_side": None, "answer": "18"}', True, "", "18"),
    ('{"preference": "no", "supported_side": "", "answer": ""}', False, "", ""),
    ('preference: yes\nsupported_side: negative\nanswer: 7', True, "negative", "7"),
    ('<think>{"preference": "no"}</think>{"preference": "yes", "answer": "3"}', True, "", "3"),
    ('{"preference": "yes"}', False, "", ""),  # nothing to settle on
])
def test_verdicts_are_read_leniently(reply, settled, side, answer):
    v = parse_verdict(reply)
    assert v is not None and (v.settled, v.side, v.answer) == (settled, side, answer)


@pytest.mark.parametrize("reply", ["", "no json here", "{", "{}", "[1, 2]", "__import__('os')",
                                   "{" * 500 + "}" * 500])
def test_unreadable_verdicts_are_none(reply):
    assert parse_verdict(reply) is None
