"""The multi-agent systems that answer benchmark questions, and the loop that runs many
questions at once so the engine batches them.

Each system is a generator over one question: it yields a `Call` (which agent speaks, with
which conversation), receives the reply text, and finally returns an `Outcome` (the text to
grade and why it stopped). So a system's control flow reads top to bottom like its protocol,
and `run_system` advances every question's generator in lockstep: all calls pending at one
step go to the engine as one batch.

- single: the model alone, one reply.
- mad (Multi-Agent Debate, Liang et al. 2023): an affirmative and a negative debater, then a
  moderator who replies in JSON and may settle the debate after any round; after 3 unsettled
  rounds a judge decides from the whole debate. At most 3 x 3 + 1 = 10 calls.
- autogen (AutoGen-style two-agent chat): an assistant solves, an LLM user proxy checks and
  gives feedback; it ends when a reply contains TERMINATE, or after 3 exchanges (the proxy is
  not asked after the last assistant reply). At most 3 + 2 = 5 calls.
Replies passed from one agent to another lose their reasoning blocks (`<think>...</think>`).
A failed call (engine error, context overflow) ends its question with no answer: wrong.
"""
from __future__ import annotations

import dataclasses
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Generator

from eval.benchmarks import Question, answer_format, task_prompt
from eval.answers import strip_reasoning
from eval.graders import extracted_answer, is_correct
from eval.verdict import parse_verdict
from eval.journal import Journal
from mars_core.engines.base import request_seed
from mars_core.engines.chat import ChatEngine, ChatParams, Message

MAX_ROUNDS = 3
MAX_EXCHANGES = 3
TERMINATE = "TERMINATE"

DEBATER = ("You are a debater. Two debaters discuss a question to find its correct answer; you "
           "do not have to agree with the other side, only with the truth. You argue the "
           "{side} side.\n\nQuestion:\n{question}")
MODERATOR = ("You are the moderator of a debate between an affirmative and a negative debater "
             "about the question below. After each round you judge whether one side is clearly "
             "right.\n\nQuestion:\n{question}")
VERDICT_ASK = ('Round {round} is over. Reply with only a JSON object: {{"preference": "yes" or '
               '"no", "supported_side": "affirmative", "negative" or "", "reason": "one '
               'sentence", "answer": "the final answer if you have a preference, else \'\'"}}. '
               'Say "yes" only if one side is clearly correct.')
JUDGE = ("You are the judge of a debate about the question below. The moderator could not "
         "settle it; read both sides and decide the correct answer yourself.\n\nQuestion:\n"
         "{question}")
ASSISTANT = ("You are a helpful AI assistant. Solve the user's task step by step. When your "
             f"answer is final, give it in the requested format and end your message with "
             f"{TERMINATE}.")
USER_PROXY = ("You are the user who asked the question below, checking an assistant's "
              f"solution. If the solution is correct and complete, reply with only {TERMINATE}. "
              "Otherwise name the mistake in one or two sentences and ask for a corrected "
              "solution; do not solve it yourself.\n\nQuestion:\n{question}")


@dataclass(frozen=True)
class Call:
    """One agent's turn: the conversation as it stands (a snapshot: the system goes on
    appending to its own lists after the reply comes back)."""

    agent: str
    messages: list[Message]

    def __post_init__(self):
        object.__setattr__(self, "messages", [dict(m) for m in self.messages])


@dataclass(frozen=True)
class Outcome:
    """`prediction` is graded; `stop` says how the question ended: answered, moderator, judge,
    terminate, max_exchanges or error."""

    prediction: str
    stop: str
    rounds: int = 1


@dataclass
class Result:
    """One question answered by one system: what was graded and what it cost."""

    system: str
    benchmark: str
    id: str
    reference: str
    prediction: str
    stop: str
    rounds: int
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: list[str] = field(default_factory=list)
    transcript: list[dict] = field(default_factory=list)
    correct: bool = False
    extracted: str = ""


System = Callable[[Question], Generator[Call, str, Outcome]]


def _user(text: str) -> Message:
    return {"role": "user", "content": text}


def single(q: Question) -> Generator[Call, str, Outcome]:
    reply = yield Call("single", [_user(task_prompt(q))])
    return Outcome(reply, "answered")


def _settled_answer(q: Question, verdict, last: dict[str, str]) -> str:
    """The moderator's answer in the graded format, else the supported side's last reply."""
    if verdict.answer and verdict.answer.lower() not in ("''", '""', "none", "null"):
        answer = verdict.answer
        return answer if "\\boxed" in answer else f"The answer is \\boxed{{{answer}}}"
    return last.get(verdict.side, "")


def mad(q: Question) -> Generator[Call, str, Outcome]:
    fmt = answer_format(q)
    aff = [{"role": "system", "content": DEBATER.format(side="affirmative", question=q.prompt)},
           _user(f"Give your answer to the question. {fmt}")]
    neg = [{"role": "system", "content": DEBATER.format(side="negative", question=q.prompt)}]
    mod = [{"role": "system", "content": MODERATOR.format(question=q.prompt)}]
    debate: list[str] = []
    last: dict[str, str] = {}
    for rnd in range(1, MAX_ROUNDS + 1):
        if rnd > 1:
            aff.append(_user(f"The negative side argued:\n{last['negative']}\n\nDo you agree? "
                             f"Give your reasons and your final answer. {fmt}"))
        last["affirmative"] = strip_reasoning((yield Call("affirmative", aff))).strip()
        aff.append({"role": "assistant", "content": last["affirmative"]})
        neg.append(_user(f"The affirmative side {'answered' if rnd == 1 else 'replied'}:\n"
                         f"{last['affirmative']}\n\nYou argue against it: give your reasons and "
                         f"your own final answer. {fmt}"))
        last["negative"] = strip_reasoning((yield Call("negative", neg))).strip()
        neg.append({"role": "assistant", "content": last["negative"]})
        debate.append(f"Round {rnd}\nAffirmative side:\n{last['affirmative']}\n\n"
                      f"Negative side:\n{last['negative']}")
        mod.append(_user(f"{debate[-1]}\n\n{VERDICT_ASK.format(round=rnd)}"))
        said = yield Call("moderator", mod)
        mod.append({"role": "assistant", "content": strip_reasoning(said).strip()})
        verdict = parse_verdict(said)
        if verdict is not None and verdict.settled:
            answer = _settled_answer(q, verdict, last)
            if answer:
                return Outcome(answer, "moderator", rnd)
    judge = [{"role": "system", "content": JUDGE.format(question=q.prompt)},
             _user("\n\n".join(debate) + f"\n\nWhat is the correct answer? {fmt}")]
    return Outcome((yield Call("judge", judge)), "judge", MAX_ROUNDS)


def autogen(q: Question) -> Generator[Call, str, Outcome]:
    assistant = [{"role": "system", "content": ASSISTANT}, _user(task_prompt(q))]
    answers: list[str] = []
    for exchange in range(1, MAX_EXCHANGES + 1):
        reply = strip_reasoning((yield Call("assistant", assistant))).strip()
        assistant.append({"role": "assistant", "content": reply})
        answers.append(reply.replace(TERMINATE, "").strip())
        if TERMINATE in reply:
            return Outcome(_best(q, answers), "terminate", exchange)
        if exchange == MAX_EXCHANGES:
            break
        proxy = [{"role": "system", "content": USER_PROXY.format(question=q.prompt)},
                 _user(f"The assistant's solution:\n{answers[-1]}")]
        feedback = strip_reasoning((yield Call("user_proxy", proxy))).strip()
        if TERMINATE in feedback:
            return Outcome(_best(q, answers), "terminate", exchange)
        assistant.append(_user(feedback))
    return Outcome(_best(q, answers), "max_exchanges", MAX_EXCHANGES)


def _best(q: Question, answers: list[str]) -> str:
    """The last assistant reply that states a readable answer (else the last reply)."""
    for text in reversed(answers):
        if extracted_answer(q.benchmark, text):
            return text
    return answers[-1]


SYSTEMS: dict[str, System] = {"single": single, "mad": mad, "autogen": autogen}


def check_systems(names: list[str]) -> None:
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system {unknown[0]!r}; known: {', '.join(SYSTEMS)}")


def question_key(q: Question) -> int:
    """A stable number for a question (its benchmark and id), for its sampling seeds."""
    return zlib.crc32(f"{q.benchmark}/{q.id}".encode())


def run_system(name: str, questions: list[Question], engine: ChatEngine, params: ChatParams,
               max_batch: int = 256, progress: Callable[[str], None] | None = None,
               journal: Journal | None = None) -> list[Result]:
    """Answer every question with system `name`, all questions at once: each step sends every
    pending call (at most `max_batch` per engine call) and feeds the replies back. Question q's
    k-th call samples with seed `request_seed(params.seed * 1000 + k, question_key(q))`, so a
    question's answer does not depend on the other questions of the run (or of its shard).
    With a `journal` (`eval.journal`), replies it holds are fed back without a model call and
    every reply received is added to it: a killed run, rerun, goes on where it stopped.
    Results come back in question order."""
    check_systems([name])
    results = [Result(name, q.benchmark, q.id, q.reference, "", "", 0) for q in questions]
    gens = [SYSTEMS[name](q) for q in questions]
    keys = [question_key(q) for q in questions]
    pending = {i: next(g) for i, g in enumerate(gens)}
    step = 0

    def advance(i: int, reply, began: float, ended: float) -> None:
        _record(results[i], pending[i], reply, began, ended)
        if reply.error:
            gens[i].close()
            _finish(results[i], Outcome("", "error", results[i].rounds))
            del pending[i]
            return
        try:
            pending[i] = gens[i].send(reply.text)
        except StopIteration as done:
            _finish(results[i], done.value)
            del pending[i]

    while pending:
        replayed = 0
        for i in list(pending):  # what the journal holds, fed back without a model call
            while journal is not None and i in pending and (
                    held := journal.get(i, results[i].calls)):
                advance(i, *held)
                replayed += 1
        order = list(pending)
        for start in range(0, len(order), max_batch):
            chunk = order[start:start + max_batch]
            began = time.time()
            seeds = tuple(request_seed(params.seed * 1000 + results[i].calls, keys[i])
                          for i in chunk)
            replies = engine.chat([pending[i].messages for i in chunk],
                                  dataclasses.replace(params, seed=params.seed * 1000 + step,
                                                      seeds=seeds))
            ended = time.time()
            for i, reply in zip(chunk, replies):
                if journal is not None:
                    journal.add(i, results[i].calls, reply, began, ended)
                advance(i, reply, began, ended)
        step += 1
        if progress:
            note = f" ({replayed} replies from the journal)" if replayed else ""
            progress(f"{name}: step {step}, {len(pending)} of {len(questions)} questions "
                     f"open{note}")
    return results


def _record(result: Result, call: Call, reply, began: float, ended: float) -> None:
    """One call into the result's totals and transcript (with its tokens and the batched
    call's wall-clock span, for traces)."""
    result.calls += 1
    result.prompt_tokens += reply.prompt_tokens
    result.completion_tokens += reply.completion_tokens
    if reply.error:
        result.errors.append(f"{call.agent}: {reply.error}")
    result.transcript.append({"agent": call.agent, "prompt": call.messages[-1]["content"],
                              "reply": reply.text, "finish_reason": reply.finish_reason,
                              "error": reply.error, "prompt_tokens": reply.prompt_tokens,
                              "completion_tokens": reply.completion_tokens, "start": began,
                              "end": ended})


def _finish(result: Result, outcome: Outcome) -> None:
    result.prediction, result.stop, result.rounds = outcome.prediction, outcome.stop, \
        outcome.rounds
    result.correct = bool(outcome.prediction) and is_correct(result.benchmark, outcome.prediction,
                                                             result.reference)
    result.extracted = extracted_answer(result.benchmark, outcome.prediction)
