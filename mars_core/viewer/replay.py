"""Episode replays: load any stored episodes and render one self-contained HTML page per episode
that steps through the game turn by turn, each player's reasoning beside the board.

Where episodes come from (`load_replays`):
- a run directory `runs/<run>/`: its newest iteration (or the one asked for);
- an iteration folder `iter_XXXX/`: its last stage holding turns, in the order
  `assign_rewards` (rewards, gates) > `filter_steps` > `generate_rollouts` (raw), with the
  advantages of `compute_advantages/samples.parquet` joined by (episode_id, turn);
- any folder with `episodes.parquet` + `turns.parquet` (the arena's output, a replays stage's
  copy, an MLflow download), optionally with `advantages.parquet` or `samples.parquet`; or only
  the `episodes_sample.parquet` turns that training logs to MLflow (episodes rebuilt from turns).
Files written by older versions lack some columns: those get the `Turn`/`Episode` defaults.

The page (`replay_html`) is one file: inline CSS, vanilla JS and the data as JSON, no network.
"""
from __future__ import annotations

import html
import json
import math
import re
from collections import Counter
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Callable

import polars as pl

from mars_core.games.base import GameAdapter
from mars_core.games.opponents import is_bot
from mars_core.games.registry import make_game
from mars_core.run.layout import (ADVANTAGES_FILE, COMPUTE_ADVANTAGES, EPISODES_FILE,
                                  EPISODES_SAMPLE_FILE, SAMPLES_FILE, TURN_STAGES, TURNS_FILE,
                                  iteration_of)
from mars_core.types import (COUNTERFACTUAL, EPISODE_SCHEMA, TURN_SCHEMA, Episode, Turn,
                             episodes_from_frames)
from mars_core.viewer.page import PAGE
from mars_core.vocab import Outcome

ADVANTAGES = f"{COMPUTE_ADVANTAGES}/{SAMPLES_FILE}"
FLAT_ADVANTAGES = (ADVANTAGES_FILE, SAMPLES_FILE)
_ANSWER = "<answer>"
# what a replay is filed under (from the model seats' `Outcome`), in pick_spread's round-robin
# order
KIND_OF = {Outcome.WIN: "won", Outcome.LOSS: "lost", Outcome.DRAW: "draw"}
INVALID_KIND, OTHER_KIND = "invalid", "other"
KINDS = ("won", "lost", INVALID_KIND, "draw", OTHER_KIND)


@dataclass(frozen=True)
class ReplayEpisode:
    """An episode as stored, plus the advantages of its turns (turn -> advantage; None where
    the folder has no advantages at all, missing turns were not in the training batch)."""

    episode: Episode
    advantages: dict[int, float] | None = None
    source: str = ""  # the folder the episode was read from
    iteration: int | None = None


# -- loading ------------------------------------------------------------------------------------
def load_replays(folder: str | Path, iteration: int | None = None) -> list[ReplayEpisode]:
    """Every episode of a run dir (newest iteration unless `iteration`), an `iter_XXXX` dir or
    a flat folder of Parquet files, in stored order. ValueError (one line) for a missing
    folder, a folder without episodes, an unreadable file or an iteration that does not exist."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"no such folder: {folder}")
    if _is_flat(folder) or _stage_of(folder) is not None:
        own = iteration_of(folder.name)
        if iteration is not None and iteration != own:
            raise ValueError(f"iteration {iteration} applies to a run directory; {folder} is "
                             "already one set of episodes")
        if _is_flat(folder):
            return _read_folder(folder, None, own)
        return _read_folder(_stage_of(folder), folder / ADVANTAGES, own)
    found = {iteration_of(d.name): d for d in folder.iterdir()
             if d.is_dir() and iteration_of(d.name) is not None and _stage_of(d) is not None}
    if not found:
        raise ValueError(f"no episodes found in {folder} (expected a run directory, an iter_XXXX "
                         f"folder or a folder with {EPISODES_FILE} and {TURNS_FILE})")
    k = max(found) if iteration is None else iteration
    if k not in found:
        raise ValueError(f"{folder} has no iteration {k} with episodes (it has "
                         f"{', '.join(str(i) for i in sorted(found))})")
    return _read_folder(_stage_of(found[k]), found[k] / ADVANTAGES, k)


def load_stage(turns: Path, samples: Path, k: int) -> list[ReplayEpisode]:
    """Iteration k's episodes in the stage folder `turns`, with the advantages of the samples
    file `samples` (what `load_replays` reads for an iteration folder)."""
    return _read_folder(Path(turns), Path(samples), k)


def _is_flat(folder: Path) -> bool:
    return (folder / TURNS_FILE).is_file() or (folder / EPISODES_SAMPLE_FILE).is_file()


def _stage_of(it_dir: Path) -> Path | None:
    """The last finished stage of an iteration that holds turns (None if none does)."""
    for stage in TURN_STAGES:
        if (it_dir / stage / TURNS_FILE).is_file():
            return it_dir / stage
    return None


def _read_folder(folder: Path, advantages: Path | None, k: int | None) -> list[ReplayEpisode]:
    turns_path = folder / TURNS_FILE
    turns_path = turns_path if turns_path.is_file() else folder / EPISODES_SAMPLE_FILE
    turns = _conform(_read(turns_path), turns_path, TURN_SCHEMA, Turn,
                     ("episode_id", "turn", "player"))
    turns = turns.sort("turn", maintain_order=True)
    if (folder / EPISODES_FILE).is_file():
        path = folder / EPISODES_FILE
        eps = _conform(_read(path), path, EPISODE_SCHEMA, Episode,
                       ("episode_id", "game", "agents", "returns", "outcomes"))
        episodes = episodes_from_frames(eps, turns)
    else:
        episodes = _episodes_from_turns(episodes_from_frames(_stub_frame(turns), turns))
    if not episodes:
        raise ValueError(f"no episodes found in {folder}")
    if advantages is None:
        advantages = next((folder / f for f in FLAT_ADVANTAGES if (folder / f).is_file()), None)
    table = _advantages(advantages) if advantages is not None and advantages.is_file() else None
    return [ReplayEpisode(ep, None if table is None else table.get(ep.episode_id, {}),
                          str(folder), k) for ep in episodes]


def _read(path: Path) -> pl.DataFrame:
    try:
        return pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as e:
        raise ValueError(f"cannot read {path}: {_first_line(e)}") from None


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _conform(frame: pl.DataFrame, path: Path, schema: dict, cls: type,
             required: tuple[str, ...]) -> pl.DataFrame:
    """`frame` with exactly the columns of `schema`: missing optional ones get the dataclass
    default (older files), a missing required one is a ValueError."""
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(f"{path} is not an episodes file: column(s) {', '.join(missing)} "
                         "missing")
    defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    zero = {pl.Utf8: "", pl.Int64: 0, pl.Float64: 0.0, pl.Boolean: True}
    cols = []
    for name, dtype in schema.items():
        if name in frame.columns:
            cols.append(pl.col(name).cast(dtype))
        elif isinstance(dtype, pl.List):
            cols.append(pl.lit([], dtype=dtype).alias(name))
        else:
            cols.append(pl.lit(defaults.get(name, zero[dtype]), dtype=dtype).alias(name))
    try:
        return frame.select(cols)
    except pl.exceptions.PolarsError as e:
        raise ValueError(f"{path} is not an episodes file: {_first_line(e)}") from None


def _stub_frame(turns: pl.DataFrame) -> pl.DataFrame:
    """One placeholder episode row per episode id of a turns-only file, in first-seen order."""
    ids = turns["episode_id"].unique(maintain_order=True).to_list()
    games = dict(zip(turns["episode_id"].to_list(), turns["game"].to_list()))
    rows = [{"episode_id": e, "game": games[e], "seed": 0, "agents": [], "returns": [],
             "outcomes": [], "error_player": -1, "error": "", "info": ""} for e in ids]
    return pl.DataFrame(rows, schema=EPISODE_SCHEMA)


def _episodes_from_turns(stubs: list[Episode]) -> list[Episode]:
    """Fill in what a turns-only sample leaves out: agents from the turns, each seat's return as
    the sum of its game rewards, the rule error from the invalid turn, outcomes from returns."""
    out = []
    for ep in stubs:
        n = max((t.player for t in ep.turns), default=-1) + 1
        agents = [next((t.agent for t in ep.turns if t.player == p), "") for p in range(n)]
        returns = [sum(t.game_reward for t in ep.turns if t.player == p) for p in range(n)]
        bad = next((t for t in ep.turns if not t.valid), None)
        if bad is not None:
            outcomes = [Outcome.INVALID if p == bad.player else Outcome.OTHER_INVALID
                        for p in range(n)]
        else:
            adapter = _adapter(ep.game)
            outcomes = [adapter.outcome(returns, p) if adapter else "" for p in range(n)]
        out.append(Episode(ep.episode_id, ep.game, ep.seed, tuple(agents), tuple(returns),
                           tuple(outcomes), bad.player if bad else -1, bad.error if bad else "",
                           ep.info, ep.turns))
    return out


def _advantages(path: Path) -> dict[str, dict[int, float]]:
    frame = _read(path)
    if not {"episode_id", "turn", "advantage"} <= set(frame.columns):
        raise ValueError(f"{path} lacks the columns episode_id, turn, advantage")
    if COUNTERFACTUAL in frame.columns:  # rows added for actions the turn did not take
        frame = frame.filter(~pl.col(COUNTERFACTUAL))
    table: dict[str, dict[int, float]] = {}
    for e, t, a in frame.select("episode_id", "turn", "advantage").iter_rows():
        table.setdefault(e, {})[int(t)] = float(a)
    return table


# -- page data ----------------------------------------------------------------------------------
def _adapter(game: str) -> GameAdapter | None:
    """The game's adapter, or None for a game this version does not know."""
    try:
        return make_game(game)
    except ValueError:
        return None


def split_reply(reply: str) -> tuple[str, str]:
    """(reasoning, answer): the reasoning is the reply before its first `<answer>` tag (think
    tags kept), the answer the rest from that tag on. No tag: all of it is reasoning."""
    head, tag, tail = reply.partition(_ANSWER)
    return head.strip(), (tag + tail).strip()


def _num(x: float | None) -> float | None:
    """A JSON-safe number: NaN and infinities become null."""
    return None if x is None or not math.isfinite(x) else float(x)


def _facts(text: str):
    """A turn's or episode's `info` JSON as an object (raw text if it is not JSON)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def final_board(episode: Episode) -> str | None:
    """The board after the last move, for board games (replays the valid actions from the
    seed); None for games without a board or when the stored moves do not replay."""
    adapter = _adapter(episode.game)
    if adapter is None or not callable(getattr(adapter, "board", None)):
        return None
    try:
        state = adapter.new_state(episode.seed)
        for t in episode.turns:
            if t.valid and t.action:
                adapter.play(state, t.action)
        return adapter.board(state)
    except (KeyError, ValueError, RuntimeError, NotImplementedError):  # pyspiel: RuntimeError
        return None


def arena_seats(arena, n: int) -> list[dict] | None:
    """Per-seat `{"result", "cause"}` from an episode's `arena` facts (the arena writes
    `{"result": [...], "cause": [...], ...}`, one entry per seat); None without them."""
    if not isinstance(arena, dict):
        return None
    res, cause = arena.get("result"), arena.get("cause")
    if not isinstance(res, list) and not isinstance(cause, list):
        return None
    at = lambda xs, p: xs[p] if isinstance(xs, list) and p < len(xs) else None  # noqa: E731
    return [{"result": at(res, p), "cause": at(cause, p)} for p in range(n)]


def replay_data(episode: Episode, advantages: dict[int, float] | None = None,
                prompt: str = "paper") -> dict:
    """Everything the page shows for one episode, JSON-able: the episode's facts and `steps`,
    one per turn (`kind: "turn"`) plus a last `kind: "end"` step with the results. `prompt`:
    the prompt layout the episode was played in (the rules shown are that layout's)."""
    adapter = _adapter(episode.game)
    if adapter is not None and prompt not in adapter.prompt_styles():
        prompt = "paper"
    rules = {p: adapter.rules_for(p, prompt) if adapter else ""
             for p in {t.player for t in episode.turns}}
    steps = [_turn_step(t, rules[t.player], advantages) for t in episode.turns]
    info = _facts(episode.info)
    arena = info.get("arena") if isinstance(info, dict) else None
    n = len(episode.agents)
    steps.append({"kind": "end", "returns": [_num(r) for r in episode.returns],
                  "outcomes": list(episode.outcomes), "error": episode.error,
                  "error_player": episode.error_player, "board": final_board(episode),
                  "arena": arena, "arena_seats": arena_seats(arena, n), "info": info})
    return {"episode_id": episode.episode_id, "game": episode.game, "seed": episode.seed,
            "agents": list(episode.agents), "returns": [_num(r) for r in episode.returns],
            "outcomes": list(episode.outcomes), "error": episode.error,
            "error_player": episode.error_player, "has_advantages": advantages is not None,
            "kind": episode_kind(episode), "steps": steps}


def _turn_step(t: Turn, rules: str, advantages: dict[int, float] | None) -> dict:
    reasoning, answer = split_reply(t.reply)
    return {"kind": "turn", "turn": t.turn, "player": t.player, "role": t.role,
            "agent": t.agent, "rules": rules, "observation": t.observation,
            "reasoning": reasoning, "answer": answer, "action": t.action, "valid": t.valid,
            "error": t.error, "error_detail": t.error_detail,
            "game_reward": _num(t.game_reward), "format_reward": _num(t.format_reward),
            "length_reward": _num(t.length_reward), "reward": _num(t.reward),
            "advantage": _num(advantages.get(t.turn)) if advantages else None,
            "eligible": t.eligible, "gate_reason": t.gate_reason, "info": _facts(t.info)}


# -- pages --------------------------------------------------------------------------------------
def replay_html(data: list[dict] | dict, title: str) -> str:
    """One self-contained HTML page for one or more episodes' `replay_data`. The data sits in
    a `<script type="application/json">` with `<`, `>` and `&` escaped as JSON unicode escapes,
    so no text in a reply can close the script or inject markup; the JS writes text only."""
    episodes = [data] if isinstance(data, dict) else list(data)
    if not episodes:
        raise ValueError("replay_html needs at least one episode")
    payload = json.dumps(episodes, ensure_ascii=False, allow_nan=False)
    for ch, esc in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        payload = payload.replace(ch, esc)
    fill = {"__TITLE__": html.escape(title), "__DATA__": payload}
    return re.sub("__TITLE__|__DATA__", lambda m: fill[m[0]], PAGE)  # one pass: no re-expansion


def episode_kind(episode: Episode) -> str:
    """won / lost / draw from the model seats' side (every seat where all are bots), invalid
    where a rule error ended the game, other for anything else (e.g. cooperative scores)."""
    if episode.error:
        return INVALID_KIND
    mine = [o for a, o in zip(episode.agents, episode.outcomes) if not is_bot(a)]
    mine = mine or list(episode.outcomes)
    for outcome, kind in KIND_OF.items():
        if outcome in mine:
            return kind
    return OTHER_KIND


def pick_spread(replays: list[ReplayEpisode], n: int) -> list[ReplayEpisode]:
    """Up to `n` episodes spread over outcomes (a won, a lost, an invalid, a drawn one, ...,
    round-robin in `KINDS` order) and, within an outcome, over games (least shown first)."""
    queues = {k: [r for r in replays if episode_kind(r.episode) == k] for k in KINDS}
    picked: list[ReplayEpisode] = []
    shown: Counter = Counter()
    while len(picked) < n and any(queues.values()):
        for kind in KINDS:
            if queues[kind] and len(picked) < n:
                best = min(queues[kind], key=lambda r: shown[r.episode.game])
                queues[kind].remove(best)
                picked.append(best)
                shown[best.episode.game] += 1
    return picked


def page_name(episode_id: str) -> str:
    """A file name for an episode's page: unsafe characters become `_`."""
    return (re.sub(r"[^A-Za-z0-9._-]", "_", episode_id).strip(".")[:120] or "episode") + ".html"


def write_replays(episodes: list[ReplayEpisode | Episode], out_dir: str | Path,
                  limit: int | None = None,
                  pick: Callable[[list[ReplayEpisode], int], list[ReplayEpisode]] = pick_spread,
                  prompt: str = "paper") -> list[Path]:
    """One page per episode (`<episode_id>.html`) of `pick(episodes, limit)` (all of them
    without a limit) plus `index.html` linking them (`prompt`: the games' prompt layout).
    Returns the episode pages written."""
    replays = [e if isinstance(e, ReplayEpisode) else ReplayEpisode(e) for e in episodes]
    chosen = replays if limit is None else pick(replays, limit)
    if not chosen:
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pages, used = [], set()
    for r in chosen:
        name = page_name(r.episode.episode_id)
        while name in used or name == "index.html":
            name = name.removesuffix(".html") + "_.html"
        used.add(name)
        ep = r.episode
        title = f"{ep.game} · {ep.episode_id}"
        (out / name).write_text(replay_html(replay_data(ep, r.advantages, prompt), title), encoding="utf-8")
        pages.append(out / name)
    (out / "index.html").write_text(_index(chosen, pages), encoding="utf-8")
    return pages


def _index(replays: list[ReplayEpisode], pages: list[Path]) -> str:
    """The index page: one row per episode page (id, game, kind, seats' outcomes, turns)."""
    rows = []
    for r, p in zip(replays, pages):
        ep = r.episode
        seats = ", ".join(f"{a}: {o}" for a, o in zip(ep.agents, ep.outcomes))
        cells = "".join(f"<td>{html.escape(c)}</td>"
                        for c in (ep.game, episode_kind(ep), seats, str(len(ep.turns))))
        rows.append(f'<tr><td><a href="{html.escape(p.name)}">{html.escape(ep.episode_id)}</a>'
                    f"</td>{cells}</tr>")
    rows = "".join(rows)
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>Replays</title><style>"
            "body{font:15px system-ui,sans-serif;margin:2em;color:#1f2328}table{border-collapse:"
            "collapse}td,th{padding:.35em .8em;border-bottom:1px solid #d0d7de;text-align:left}"
            "</style></head><body><h1>Replays</h1><table><tr><th>episode</th><th>game</th>"
            f"<th>kind</th><th>seats</th><th>turns</th></tr>{rows}</table></body></html>")
