"""MLflow traces of finished conversations and games: one trace per multi-agent conversation
(single, MAD, AutoGen) and per arena game, one span per agent turn, linked to the evaluation's
MLflow run (`mlflow.sourceRun`), so every turn shows in the experiment's Traces tab.

Traces are written after the work is done, from what was recorded (`eval.systems.Result`,
`mars_core.types.Episode`): the game loop and the engine never see MLflow, and a tracing
failure is a warning, never a failed evaluation.

Why not the fluent API (`mlflow.start_span`, `MlflowClient.start_trace`)? Those export through
MLflow's global tracer provider, which sends traces to the *global* tracking URI (and, by
default, from a background queue). The pipeline passes a tracking URI explicitly and never sets
the global one, so the spans are built here on a private OpenTelemetry tracer (never the global
one) and written straight to the store of the given URI with MLflow's own tracing client:
`TracingClient.start_trace` (the trace's info: tags, metadata, run link, the grader's verdict as
an assessment) and `TracingClient.log_spans` (many traces' spans per call: one database session
for a SQL store, one OTLP request for a server). No global MLflow or OpenTelemetry state changes.

Timing: a record that carries real per-turn times (`start`/`end`, epoch seconds) keeps them;
otherwise turns get ordered 1 ms slots from the logging time (`mars.timing: synthetic`).
Gated benchmarks (GPQA) keep only ids, grades and counts: their text becomes `GATED`.
"""
from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from mlflow.entities import AssessmentSource, Feedback, LiveSpan, SpanStatus, SpanType
from mlflow.entities.trace_data import TraceData
from mlflow.entities.trace_info import TraceInfo
from mlflow.entities.trace_location import TraceLocation
from mlflow.entities.trace_state import TraceState
from mlflow.tracing.client import TracingClient
from mlflow.tracing.constant import (TRACE_SCHEMA_VERSION, TRACE_SCHEMA_VERSION_KEY,
                                     SpanAttributeKey, TraceMetadataKey, TraceTagKey)
from mlflow.tracing.utils import generate_trace_id_v3
from opentelemetry import trace as otel
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from eval.mas import read_records
from mars_core.games.opponents import is_bot
from mars_core.privacy.redact import redact, redact_text
from mars_core.types import Episode

_logger = logging.getLogger(__name__)

GATED = "[withheld: gated benchmark]"
BATCH = 200  # traces per log_spans call
_MS = 1_000_000


@dataclass
class SpanSpec:
    """One span, before it becomes an MLflow span."""

    name: str
    span_type: str
    inputs: Any
    outputs: Any
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    error: str = ""  # non-empty: the span's status is ERROR with this description


@dataclass
class TraceSpec:
    """One trace: a root span, its children (the turns), trace tags and an optional grade."""

    root: SpanSpec
    turns: list[SpanSpec]
    tags: dict[str, str]
    correct: bool | None = None
    rationale: str = ""
    extra_metadata: dict[str, str] = field(default_factory=dict)


def _slots(n: int, start_ns: int, times: list[tuple[float, float] | None]) -> list[tuple[int, int]]:
    """(start, end) ns of n turns: the recorded times where every turn has them, else ordered
    1 ms slots from `start_ns`."""
    if n and all(t is not None for t in times):
        return [(int(a * 1e9), max(int(b * 1e9), int(a * 1e9))) for a, b in times]
    return [(start_ns + i * _MS, start_ns + (i + 1) * _MS) for i in range(n)]


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"input_tokens": int(prompt), "output_tokens": int(completion),
            "total_tokens": int(prompt) + int(completion)}


def _call_spans(r: dict, text, slots: list[tuple[int, int]], gated: bool) -> list[SpanSpec]:
    """A span per model call of one conversation, named `<agent> <k>` (its k-th call)."""
    transcript, seen, spans = r["transcript"], {}, []
    for i, (t, (a, b)) in enumerate(zip(transcript, slots)):
        seen[t["agent"]] = seen.get(t["agent"], 0) + 1
        attrs = {"mars.agent": t["agent"], "mars.turn": i,
                 "mars.finish_reason": t.get("finish_reason", "")}
        # per-call counts when the record has them; a single call's are the conversation's
        tokens = ((t.get("prompt_tokens", 0), t["completion_tokens"]) if "completion_tokens" in t
                  else (r["prompt_tokens"], r["completion_tokens"]) if len(transcript) == 1
                  else None)
        if tokens is not None:
            attrs |= {"mars.prompt_tokens": tokens[0], "mars.completion_tokens": tokens[1],
                      SpanAttributeKey.CHAT_USAGE: _usage(*tokens)}
        error = ("withheld" if gated else t["error"]) if t.get("error") else ""
        spans.append(SpanSpec(
            f"{t['agent']} {seen[t['agent']]}", SpanType.CHAT_MODEL,
            {"messages": [{"role": "user", "content": text(t.get("prompt", ""))}]},
            text(t.get("reply", "")), attrs, a, b, error))
    return spans


def conversation_trace(result, model: str, gated: bool, start_ns: int) -> TraceSpec:
    """The trace of one answered question (`eval.systems.Result`, or the dict of one record):
    a root span for the system (question id, benchmark, final answer, grade) and a span per
    model call (agent, prompt, reply, tokens when the record has them per call). The grade
    (correct/wrong, extracted answer) is on the root, the last call and the trace's
    `correct` assessment."""
    r = result if isinstance(result, dict) else vars(result)
    text = (lambda s: GATED if s else "") if gated else (lambda s: s)
    transcript = r["transcript"]
    times = [(t["start"], t["end"]) if t.get("start") is not None and t.get("end") is not None
             else None for t in transcript]
    slots = _slots(len(transcript), start_ns, times)
    turns = _call_spans(r, text, slots, gated)
    verdict = {"mars.correct": bool(r["correct"]), "mars.extracted": r["extracted"],
               "mars.reference": r["reference"]}
    if turns:
        turns[-1].attributes |= verdict | {"mars.verdict": "correct" if r["correct"] else "wrong"}
    errors = [e.split(":", 1)[0] + ": withheld" if gated else e for e in r["errors"]]
    root = SpanSpec(
        r["system"], SpanType.AGENT,
        {"benchmark": r["benchmark"], "question_id": r["id"], "system": r["system"],
         "prompt": text(transcript[0].get("prompt", "")) if transcript else ""},
        {"prediction": text(r["prediction"]), "extracted": r["extracted"],
         "correct": bool(r["correct"]), "stop": r["stop"]},
        {"mars.question_id": r["id"], "mars.benchmark": r["benchmark"],
         "mars.system": r["system"], "mars.model": model, "mars.stop": r["stop"],
         "mars.rounds": r["rounds"], "mars.calls": r["calls"],
         "mars.prompt_tokens": r["prompt_tokens"],
         "mars.completion_tokens": r["completion_tokens"], "mars.gated": gated,
         "mars.errors": errors, **verdict,
         "mars.timing": "recorded" if transcript and all(times) else "synthetic"},
        min([a for a, _ in slots], default=start_ns),
        max([b for _, b in slots], default=start_ns + _MS), "; ".join(errors))
    tags = {"mars.kind": "mas-eval", "mars.system": r["system"], "mars.benchmark": r["benchmark"],
            "mars.question": str(r["id"]), "mars.model": model,
            "mars.correct": str(bool(r["correct"])).lower(), "mars.stop": r["stop"],
            TraceTagKey.TRACE_NAME: f"{r['system']} {r['benchmark']} {r['id']}"}
    usage = _usage(r["prompt_tokens"], r["completion_tokens"])
    return TraceSpec(root, turns, tags, bool(r["correct"]),
                     f"extracted {r['extracted']!r}, reference {r['reference']!r}",
                     {TraceMetadataKey.TOKEN_USAGE: json.dumps(usage)})


def game_trace(ep: Episode, start_ns: int) -> TraceSpec:
    """The trace of one arena game: a root span for the game (id, seed, players, outcome and
    the arena's verdict) and a span per move (seat, agent, observation, reply, action, tokens,
    validity, gate reason, the seat's outcome)."""
    info = json.loads(ep.info) if ep.info else {}
    verdict = info.get("arena", {})
    slots = _slots(len(ep.turns), start_ns, [None] * len(ep.turns))
    turns = []
    for t, (a, b) in zip(ep.turns, slots):
        outcome = ep.outcomes[t.player] if t.player < len(ep.outcomes) else ""
        attrs = {"mars.agent": t.agent, "mars.role": t.role, "mars.seat": t.player,
                 "mars.turn": t.turn, "mars.action": t.action, "mars.valid": t.valid,
                 "mars.error": t.error, "mars.error_detail": t.error_detail,
                 "mars.eligible": t.eligible, "mars.gate_reason": t.gate_reason,
                 "mars.outcome": outcome, "mars.game_reward": t.game_reward,
                 "mars.prompt_tokens": len(t.prompt_ids),
                 "mars.completion_tokens": len(t.completion_ids)}
        if t.completion_ids:
            attrs[SpanAttributeKey.CHAT_USAGE] = _usage(len(t.prompt_ids), len(t.completion_ids))
        turns.append(SpanSpec(
            f"turn {t.turn} {t.agent}", SpanType.TOOL if is_bot(t.agent) else SpanType.CHAT_MODEL,
            {"observation": t.observation}, {"reply": t.reply, "action": t.action}, attrs, a, b,
            "" if t.valid else f"{t.error}: {t.error_detail}".strip(": ")))
    players = [f"{agent} (seat {p})" for p, agent in enumerate(ep.agents)]
    outcome = {f"{p}:{agent}": o for p, (agent, o) in enumerate(zip(ep.agents, ep.outcomes))}
    root = SpanSpec(
        ep.game, SpanType.AGENT,
        {"episode_id": ep.episode_id, "game": ep.game, "seed": ep.seed, "players": players},
        {"outcomes": outcome, "returns": list(ep.returns), **verdict},
        {"mars.episode": ep.episode_id, "mars.game": ep.game, "mars.seed": ep.seed,
         "mars.players": list(ep.agents), "mars.outcomes": list(ep.outcomes),
         "mars.returns": list(ep.returns), "mars.error": ep.error,
         "mars.error_seat": ep.error_player, "mars.turns": len(ep.turns),
         "mars.decided_by": verdict.get("decided_by", ""), "mars.timing": "synthetic"},
        start_ns, max([b for _, b in slots], default=start_ns + _MS))
    tags = {"mars.kind": "arena", "mars.game": ep.game, "mars.episode": ep.episode_id,
            "mars.seed": str(ep.seed), "mars.players": ",".join(ep.agents),
            "mars.decided_by": verdict.get("decided_by", ""), "mars.error": ep.error,
            TraceTagKey.TRACE_NAME: f"{ep.game} {ep.episode_id}"}
    tokens = [(len(t.prompt_ids), len(t.completion_ids)) for t in ep.turns]
    usage = _usage(sum(p for p, _ in tokens), sum(c for _, c in tokens))
    return TraceSpec(root, turns, tags,
                     extra_metadata={TraceMetadataKey.TOKEN_USAGE: json.dumps(usage)})


_TRACER = None


def _tracer():
    """A private OpenTelemetry tracer: no processor, no exporter, never the global provider."""
    global _TRACER
    if _TRACER is None:
        _TRACER = TracerProvider(resource=Resource({"service.name": "mars"})
                                 ).get_tracer("mars.traces")
    return _TRACER


def _build(spec: TraceSpec, experiment_id: str, run_id: str | None):
    """The MLflow TraceInfo and spans of one TraceSpec, secrets masked (`mars_core.privacy.redact`:
    an endpoint's URL credentials in a model's name or an error)."""
    spec = _redacted(spec)
    tracer = _tracer()
    root_otel = tracer.start_span(spec.root.name, start_time=spec.root.start_ns)
    trace_id = generate_trace_id_v3(root_otel)
    spans = []
    for s, parent in [(spec.root, None), *((t, root_otel) for t in spec.turns)]:
        o = root_otel if parent is None else tracer.start_span(
            s.name, context=otel.set_span_in_context(parent), start_time=s.start_ns)
        span = LiveSpan(o, trace_id, s.span_type)
        span.set_inputs(s.inputs)
        span.set_attributes(s.attributes)
        span.end(outputs=s.outputs, end_time_ns=s.end_ns,
                 status=SpanStatus("ERROR", s.error) if s.error else None)
        spans.append(span)
    metadata = {TRACE_SCHEMA_VERSION_KEY: str(TRACE_SCHEMA_VERSION),
                TraceMetadataKey.INPUTS: _preview(spec.root.inputs),
                TraceMetadataKey.OUTPUTS: _preview(spec.root.outputs), **spec.extra_metadata}
    if run_id:
        metadata[TraceMetadataKey.SOURCE_RUN] = run_id  # the run's Traces tab lists it
    assessments = [] if spec.correct is None else [Feedback(
        name="correct", value=spec.correct, rationale=spec.rationale, trace_id=trace_id,
        source=AssessmentSource(source_type="CODE", source_id="eval.graders.is_correct"))]
    info = TraceInfo(trace_id=trace_id, trace_location=TraceLocation.from_experiment_id(
        experiment_id), request_time=spec.root.start_ns // _MS,
        execution_duration=(spec.root.end_ns - spec.root.start_ns) // _MS,
        state=TraceState.ERROR if spec.root.error else TraceState.OK,
        request_preview=_preview(spec.root.inputs), response_preview=_preview(spec.root.outputs),
        trace_metadata=metadata, tags=dict(spec.tags), assessments=assessments)
    return info, spans


def _redacted(spec: TraceSpec) -> TraceSpec:
    def span(s: SpanSpec) -> SpanSpec:
        return SpanSpec(s.name and redact_text(s.name), s.span_type, redact(s.inputs),
                        redact(s.outputs), redact(s.attributes), s.start_ns, s.end_ns,
                        redact_text(s.error))

    return TraceSpec(span(spec.root), [span(t) for t in spec.turns], redact(spec.tags),
                     spec.correct, redact_text(spec.rationale), redact(spec.extra_metadata))


def _preview(value: Any, limit: int = 1000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def write_traces(tracking_uri: str, experiment_id: str, run_id: str | None,
                 specs: Iterable[TraceSpec], batch: int = BATCH) -> list[str]:
    """Write the traces (each linked to `run_id`) to the store at `tracking_uri`: each trace's
    info, then its batch's spans in one `log_spans` call. A store that cannot hold spans (a
    file store, an old server) gets each trace's spans as its artifact instead. Returns the
    trace ids. Raises on failure (see `log_conversation_traces` / `log_game_traces`)."""
    client = TracingClient(tracking_uri)
    specs, ids = list(specs), []
    # a server takes each trace's info in its own request: a few at once hide the latency;
    # a database file takes them one at a time
    remote = tracking_uri.startswith(("http://", "https://"))
    pool = ThreadPoolExecutor(8) if remote else None
    try:
        for start in range(0, len(specs), batch):
            built = [_build(s, experiment_id, run_id) for s in specs[start:start + batch]]
            ids += _write_batch(client, experiment_id, built, pool)
    finally:
        if pool:
            pool.shutdown()
    return ids


def _write_batch(client: TracingClient, experiment_id: str, built: list, pool) -> list[str]:
    infos = list((pool.map if pool else map)(client.start_trace, [i for i, _ in built]))
    try:
        client.log_spans(experiment_id, [s for _, spans in built for s in spans])
    except NotImplementedError:  # no span storage: the spans go to each trace's artifact
        for info, (_, spans) in zip(infos, built):
            client._upload_trace_data(info, TraceData(spans=spans))
    return [info.trace_id for info in infos]


def _safe(what: str, make, tracking_uri, experiment_id, run_id) -> list[str]:
    started = time.perf_counter()
    try:
        ids = write_traces(tracking_uri, experiment_id, run_id, make())
    except Exception as e:  # tracing never fails an evaluation
        _logger.warning("MLflow traces of %s not written (%s: %s)", what, type(e).__name__, e)
        return []
    if ids:
        _logger.info("%d MLflow traces of %s in %.2f s", len(ids), what,
                     time.perf_counter() - started)
    return ids


def log_conversation_traces(tracking_uri: str, experiment_id: str, run_id: str,
                            results: list | str | Path, model: str,
                            gated: set[str] | frozenset = frozenset()) -> list[str]:
    """One trace per answered question (Results, record dicts, or the records folder that
    `eval.mas.write_records` wrote), linked to `run_id`; the text of questions from a `gated`
    benchmark is withheld. Never raises: a failure is logged as a warning and returns []."""
    def make():
        rs = read_records(Path(results)) if isinstance(results, (str, Path)) else results
        now = time.time_ns()
        return [conversation_trace(r, model, (r["benchmark"] if isinstance(r, dict)
                                              else r.benchmark) in gated, now + i * _MS)
                for i, r in enumerate(rs)]

    return _safe("conversations", make, tracking_uri, experiment_id, run_id)


def log_game_traces(tracking_uri: str, experiment_id: str, run_id: str,
                    episodes: list[Episode]) -> list[str]:
    """One trace per arena game, linked to `run_id`. Never raises (see above)."""
    now = time.time_ns()
    return _safe("games", lambda: [game_trace(ep, now + i * _MS) for i, ep in enumerate(episodes)],
                 tracking_uri, experiment_id, run_id)
