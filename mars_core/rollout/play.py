"""Batched self-play: many games at once, every pending model turn in one engine call.

`play_episodes` is the only game loop in the project: training rollouts, evaluation against
bots and the synthetic warm-up data all go through it. Seats are agents: "policy" (sampled from
the engine) or a bot spec. Every reply, the model's or a bot's, passes the Action Validator
(`mars_core.rollout.validator`) before the game sees it, so a model reply can never crash a game: an
invalid reply ends the episode with a typed error (`parsing_failure` or `invalid_action`).
Sampling can differ per game (`per_game`), e.g. In2AI's per-game temperatures.
"""
from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tqdm.auto import tqdm

from mars_core.engines.base import Engine, request_seed
from mars_core.games import base as gb
from mars_core.games.bots import make_bot
from mars_core.games.opponents import is_bot
from mars_core.games.registry import make_game
from mars_core.types import Completion, Episode, SamplingParams, Turn
from mars_core.rollout import mc_values
from mars_core.rollout.validator import validate
from mars_core.vocab import FinishReason, Outcome

PREFILLS = {"answer": "<answer>", "think": "<think>\n", "none": ""}


@dataclass(frozen=True)
class EpisodeSpec:
    episode_id: str
    game: str
    seed: int
    agents: tuple[str, ...]  # one per seat: "policy" or a bot spec


class PromptBuilder:
    """Chat-templated prompt ids for a seat's conversation, plus the assistant prefill
    (`<answer>` for models that don't think, `<think>\\n` for thinking models).

    With `keep_history` (MARS) a seat's conversation grows token by token: its next prompt is
    its previous prompt, its reply's tokens exactly as they were sampled (reasoning included),
    then the template's end of that turn, the next observation and the generation prompt
    (`follow_up_ids`). The template is never applied again to earlier turns, so a template
    that drops earlier reasoning (Qwen3's removes every `<think>` block but the last turn's)
    cannot take it out of the conversation: the model keeps seeing its own reasoning, as
    SPEC section 1 asks, and trains on the exact tokens it was prompted with. Without
    `keep_history` each prompt is the rules and the current observation only. `style` is the
    games' prompt layout (`mars_core.games.base.PROMPT_STYLES`: the papers' wording, or the
    compact one)."""

    MARKER = "MARS-REPLY-MARKER"  # stands for a reply when reading the template's turn ending

    def __init__(self, tokenizer, prefill: str = "answer", keep_history: bool = True,
                 max_context_tokens: int = 2048, style: str = "paper") -> None:
        if style not in gb.PROMPT_STYLES:
            raise ValueError(f"unknown prompt layout {style!r}; choose one of: "
                             + ", ".join(gb.PROMPT_STYLES))
        self.tokenizer = tokenizer
        self.style = style
        self.prefill = PREFILLS[prefill]
        self.keep_history = keep_history
        self.max_context_tokens = max_context_tokens
        self.eos_ids = {tokenizer.eos_token_id} - {None}

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True)
        return self.tokenizer.encode(text + self.prefill, add_special_tokens=False)

    def follow_up_ids(self, conversation: list[int], observation: str) -> list[int]:
        """The next prompt of a seat whose conversation so far (its last prompt and reply, as
        token ids) is `conversation`: the template's end of the reply's turn, then the next
        user turn with `observation`, the generation prompt and the prefill. A trailing
        end-of-sequence token of the reply is dropped (the template writes its own end)."""
        probe = [{"role": "system", "content": "rules"}, {"role": "user", "content": "state"},
                 {"role": "assistant", "content": self.MARKER},
                 {"role": "user", "content": observation}]
        text = self.tokenizer.apply_chat_template(probe, tokenize=False,
                                                  add_generation_prompt=True)
        tail = text[text.rindex(self.MARKER) + len(self.MARKER):]
        while conversation and conversation[-1] in self.eos_ids:
            conversation = conversation[:-1]
        return list(conversation) + self.tokenizer.encode(tail + self.prefill,
                                                          add_special_tokens=False)

    def reply_ids(self, reply: str, completion: Completion | None) -> list[int]:
        """A reply's tokens after the prompt's prefill: as sampled, or (a bot's move, recorded
        for the warm-up) its text encoded."""
        if completion is not None:
            return list(completion.token_ids)
        body = reply[len(self.prefill):] if reply.startswith(self.prefill) else reply
        return self.tokenizer.encode(body, add_special_tokens=False)


@dataclass
class _Live:
    """One game in progress (mutable while it is played)."""

    spec: EpisodeSpec
    adapter: gb.GameAdapter
    state: object
    bots: dict[int, object]
    rules: list[str]  # each seat's system message
    style: str  # the prompt layout (PromptBuilder.style)
    moves_since: list[list[tuple[int, str]]]
    conversation: list[list[int]] = field(default_factory=list)  # keep_history: ids so far
    turns: list[dict] = field(default_factory=list)
    last_turn_of: dict[int, int] = field(default_factory=dict)
    unclaimed: list[float] = field(default_factory=list)
    error_player: int = -1
    error: str = ""


def _start(spec: EpisodeSpec, style: str = "paper") -> _Live:
    adapter = make_game(spec.game)
    if style not in adapter.prompt_styles():
        raise ValueError(f"{spec.game} has no {style!r} prompt layout; it has: "
                         + ", ".join(adapter.prompt_styles()))
    if len(spec.agents) != adapter.num_players:
        raise ValueError(f"{spec.game} needs {adapter.num_players} agents, got {len(spec.agents)}")
    bots = {p: make_bot(a, adapter, spec.seed * 1000 + p) for p, a in enumerate(spec.agents)
            if is_bot(a)}
    n = adapter.num_players
    return _Live(spec, adapter, adapter.new_state(spec.seed), bots,
                 rules=[adapter.rules_for(p, style) for p in range(n)], style=style,
                 moves_since=[[] for _ in range(n)],
                 conversation=[[] for _ in range(n)], unclaimed=[0.0] * n)


def _observe(g: _Live, prompts: PromptBuilder | None) -> dict:
    """Open the next turn: the observation for the seat to move and its prompt ids."""
    p = g.adapter.current_player(g.state)
    obs = g.adapter.observation_for(g.state, p, g.moves_since[p], g.style)
    g.moves_since[p] = []
    if prompts is None:
        ids = []
    elif prompts.keep_history and g.conversation[p]:
        ids = prompts.follow_up_ids(g.conversation[p], obs)
    else:
        ids = prompts.prompt_ids([{"role": "system", "content": g.rules[p]},
                                  {"role": "user", "content": obs}])
    return {"player": p, "observation": obs, "prompt_ids": ids}


def _record(g: _Live, t: dict, reply: str, verdict: gb.Parsed, completion: Completion | None,
            prompts: PromptBuilder | None, sampling: SamplingParams | None = None) -> None:
    """Record the turn `t` (a model's when `completion` is given, drawn with `sampling`) and
    play its action unless the Action Validator refused it."""
    p, action, error = t["player"], verdict.action, verdict.error
    turn = {
        "episode_id": g.spec.episode_id, "game": g.spec.game, "turn": len(g.turns),
        "player": p, "role": g.adapter.seat_role(g.state, p), "agent": g.spec.agents[p],
        "observation": t["observation"], "prompt_ids": tuple(t["prompt_ids"]),
        "completion_ids": tuple(completion.token_ids) if completion else (),
        "logprobs": tuple(completion.logprobs) if completion else (),
        **({"temperature": sampling.temperature, "top_p": sampling.top_p,
            "top_k": sampling.top_k, "min_p": sampling.min_p} if sampling else {}),
        "reply": reply, "finish_reason": completion.finish_reason if completion else "",
        "action": action or "", "valid": not error, "error": error,
        "error_detail": verdict.detail, "game_reward": g.unclaimed[p],
        "action_values": t.get("action_values", ""),
    }
    g.unclaimed[p] = 0.0
    g.last_turn_of[p] = len(g.turns)
    g.turns.append(turn)
    if prompts is not None and prompts.keep_history:
        g.conversation[p] = list(t["prompt_ids"]) + prompts.reply_ids(reply, completion)
    if error:
        g.error_player, g.error = p, error
        return
    for q in range(g.adapter.num_players):
        if q != p:
            g.moves_since[q].append((p, action))
    rewards, info = g.adapter.play(g.state, action)
    if info:
        turn["info"] = json.dumps(info, sort_keys=True)
    for q, r in enumerate(rewards):
        _credit(g, q, r)


def _credit(g: _Live, player: int, reward: float) -> None:
    """A reward goes to the player's own most recent turn (or waits for its first turn)."""
    if player in g.last_turn_of:
        g.turns[g.last_turn_of[player]]["game_reward"] += reward
    else:
        g.unclaimed[player] += reward


def _finish(g: _Live) -> Episode:
    a, n = g.adapter, g.adapter.num_players
    if g.error:
        returns = a.returns(g.state)
        forfeit = a.forfeit_return(g.state, g.error_player)
        g.turns[g.last_turn_of[g.error_player]]["game_reward"] += forfeit - returns[g.error_player]
        returns[g.error_player] = forfeit
        outcomes = tuple(Outcome.INVALID if p == g.error_player else Outcome.OTHER_INVALID
                         for p in range(n))
    else:
        returns = a.returns(g.state)
        outcomes = tuple(a.outcome(returns, p) for p in range(n))
    turns = tuple(Turn(**t) for t in g.turns)
    info = a.final_info(g.state)
    return Episode(g.spec.episode_id, g.spec.game, g.spec.seed, g.spec.agents,
                   tuple(float(r) for r in returns), outcomes, g.error_player, g.error,
                   json.dumps(info, sort_keys=True) if info else "", turns)


def _advance_bots(g: _Live, prompts: PromptBuilder | None, record_bot_prompts: bool) -> dict | None:
    """Play bot turns until a policy seat must move; return that turn, or None when over."""
    while not g.error and not g.adapter.is_terminal(g.state):
        p = g.adapter.current_player(g.state)
        t = _observe(g, prompts if (record_bot_prompts or not is_bot(g.spec.agents[p])) else None)
        if not is_bot(g.spec.agents[p]):
            return t
        choice = g.bots[p].act(g.adapter, g.state)  # OpenSpiel bots answer with action ids
        if not isinstance(choice, str):
            choice = g.adapter.action_string(g.state, p, choice)
        reply = gb.format_answer(choice)
        _record(g, t, reply, validate(g.adapter, g.state, reply), None,
                prompts if record_bot_prompts else None)
    return None


@dataclass
class RolloutStats:
    generated_tokens: int = 0
    generate_seconds: float = 0.0
    engine_calls: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.generate_seconds if self.generate_seconds else 0.0


class PlayStopped(RuntimeError):
    """Play ended before its games did, as its caller asked (`play_episodes(stop=...)`)."""


def play_episodes(specs: list[EpisodeSpec], engine: Engine | dict[str, Engine] | None,
                  prompts: PromptBuilder | None, sampling: SamplingParams, *,
                  record_bot_prompts: bool = False, progress: bool = True,
                  stats: RolloutStats | None = None,
                  per_game: dict[str, SamplingParams] | None = None,
                  stop: Callable[[], bool] | None = None,
                  mc_rollouts: int = 0) -> list[Episode]:
    """Play every spec to the end, concurrently; returns the episodes in spec order.
    `engine` serves every model seat, or is a dict agent name -> engine (the policy and frozen
    opponents: one batched call per model and sampling setting). `per_game` replaces
    `sampling` for the games it names. `stop()`, asked before each round of engine calls,
    ends the play with PlayStopped (games played in a thread whose flow is failing). With
    `mc_rollouts`, every model turn records the Monte-Carlo value of each legal action
    (`mars_core.rollout.mc_values`, seeded by the turn) in `action_values`."""
    engines = engine if isinstance(engine, dict) else None
    live = [_start(s, prompts.style if prompts is not None else "paper") for s in specs]
    done: dict[int, Episode] = {}
    stats = stats if stats is not None else RolloutStats()
    bar = tqdm(total=len(specs), desc="rollout", unit="game", disable=not progress, leave=False)
    while len(done) < len(live):
        if stop is not None and stop():
            bar.close()
            raise PlayStopped(f"play stopped with {len(live) - len(done)} of {len(live)} games "
                              "unfinished")
        pending = []
        for i, g in enumerate(live):
            if i in done:
                continue
            t = _advance_bots(g, prompts, record_bot_prompts)
            if t is None:
                done[i] = _finish(g)
                bar.update(1)
            else:
                pending.append((g, t))
        if not pending:
            break
        params = [(per_game or {}).get(g.spec.game, sampling) for g, _ in pending]
        calls: dict[tuple, list[int]] = defaultdict(list)
        for i, ((g, t), p) in enumerate(zip(pending, params)):
            agent = g.spec.agents[t["player"]] if engines is not None else ""
            calls[(agent, p)].append(i)
        completions: list[Completion | None] = [None] * len(pending)
        for (agent, p), idx in calls.items():  # one engine call per model and sampling setting
            model = _engine_for(engines, agent) if engines is not None else engine
            seeds = [turn_seed(p.seed, pending[i][0]) for i in idx]
            got = _generate(model, prompts, p, [pending[i][1] for i in idx], stats, seeds)
            for i, c in zip(idx, got):
                completions[i] = c
        for (g, t), c, p in zip(pending, completions, params):
            if mc_rollouts:
                t["action_values"] = mc_values.encode(mc_values.action_values(
                    g.adapter, g.state, mc_rollouts, turn_seed(p.seed, g)))
            reply = prompts.prefill + c.text
            verdict = validate(g.adapter, g.state, reply, c.finish_reason, p.max_new_tokens)
            _record(g, t, reply, verdict, c, prompts, p)
    bar.close()
    return [done[i] for i in range(len(live))]


def _engine_for(engines: dict[str, Engine], agent: str) -> Engine:
    if agent not in engines:
        raise ValueError(f"no engine for the model seat {agent!r}; engines: {', '.join(engines)}")
    return engines[agent]


def turn_seed(seed: int, g: _Live) -> int:
    """The sampling seed of a game's next model turn: from the sampling seed, the episode's
    seed and the turn's number only. So a game plays the same whichever games share its
    engine calls, in one process or in any shard of a cluster."""
    return request_seed(request_seed(seed, g.spec.seed), len(g.turns))


def _generate(engine: Engine, prompts: PromptBuilder, sampling: SamplingParams,
              turns: list[dict], stats: RolloutStats, seeds: list[int]) -> list[Completion]:
    """One batched engine call, each prompt with its own seed; prompts that leave no room
    for a reply are overflows."""
    room = prompts.max_context_tokens - sampling.max_new_tokens
    fits = [i for i, t in enumerate(turns) if len(t["prompt_ids"]) <= room]
    out = [Completion((), (), "", FinishReason.CONTEXT_OVERFLOW)] * len(turns)
    if fits:
        params = replace(sampling, seeds=tuple(seeds[i] for i in fits))
        start = time.perf_counter()
        got = engine.generate([list(turns[i]["prompt_ids"]) for i in fits], params)
        stats.generate_seconds += time.perf_counter() - start
        stats.generated_tokens += sum(len(c.token_ids) for c in got)
        for i, c in zip(fits, got):
            out[i] = c
    stats.engine_calls += 1
    return out
