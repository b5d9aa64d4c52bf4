"""The replies a system run has received so far, on disk, so an interrupted reasoning
evaluation resumes where it stopped instead of starting over (on two CPU cores one model's
debate over 120 questions runs for more than an hour).

A journal file answers one system, one model and one list of questions: its first line is a
header with a fingerprint of those (a SHA-256 digest: no model path, URL or credential is
written), then one JSON line per reply received: question index `i`, that question's call
index `k`, the reply, and the span of the batched call it came in. A system's control flow is
a function of the replies it gets and each call's sampling seed is a function of the question
and its call index (`eval.systems.run_system`), so feeding a question's recorded replies back
to its system replays it exactly, with no model call, and the run goes on from the first reply
the journal lacks.

What the journal does not hold: replies to questions of gated benchmarks (GPQA: no question
or reply text in files), which are asked again on resume, and a last line cut short by the
kill. A journal written for other settings (another model, sampling, system or question list)
is set aside with a one-line note, and the run starts over.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from mars_core.engines.chat import ChatParams, ChatReply
from mars_core.privacy.redact import redact_text

VERSION = 1


def fingerprint(model: str, system: str, questions: list[tuple[str, str]], params: ChatParams
                ) -> str:
    """What a journal's replies answer: the model (its spec and, for a local folder, each
    file's name, size and modification time, so a retrained model at the same path does not
    replay), the system, the questions (benchmark, id) in order, and the sampling."""
    path = Path(model)
    files = ([(str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns)
              for f in sorted(path.rglob("*")) if f.is_file()] if path.is_dir() else [])
    sampling = {k: v for k, v in asdict(params).items() if k != "seeds"}
    body = json.dumps({"version": VERSION, "model": model, "files": files, "system": system,
                       "questions": questions, "sampling": sampling}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _header(line: str) -> dict | None:
    try:
        head = json.loads(line)
    except ValueError:
        return None
    return head if isinstance(head, dict) and "journal" in head and "fingerprint" in head \
        else None


def is_journal(path: Path) -> bool:
    """Whether the file at `path` opens with a journal's header line."""
    with Path(path).open(encoding="utf-8", errors="replace") as f:
        return _header(f.readline()) is not None


class Journal:
    """One system run's replies at `path` (created with its folder). `get(i, k)` is question
    i's k-th reply when the journal holds it; `add` appends one and flushes it to disk.
    Questions in `withheld` (indices of gated questions) are never written."""

    def __init__(self, path: Path, digest: str, withheld: set[int] = frozenset()):
        self.path = Path(path)
        self.digest = digest
        self.withheld = set(withheld)
        self.replies: dict[tuple[int, int], tuple[ChatReply, float, float]] = {}
        kept = self._read()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # rewrite what was read (drops a line cut by the kill), then append to it
        self.path.write_text("".join(line + "\n" for line in kept))
        self._file = self.path.open("a", encoding="utf-8")

    def _read(self) -> list[str]:
        header = json.dumps({"journal": VERSION, "fingerprint": self.digest})
        if not self.path.exists():
            return [header]
        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        head = _header(lines[0]) if lines else None
        if (head or {}).get("fingerprint") != self.digest:
            aside = self.path.with_name(self.path.name + ".other")
            self.path.replace(aside)
            print(f"journal {self.path}: written for other settings (model, sampling, system "
                  f"or questions), set aside as {aside.name}; starting over")
            return [header]
        kept = [header]
        for line in lines[1:]:
            try:
                entry = json.loads(line)
                key = (int(entry["i"]), int(entry["k"]))
                self.replies[key] = (ChatReply(**entry["reply"]), float(entry["start"]),
                                     float(entry["end"]))
            except (ValueError, KeyError, TypeError):
                break  # the last line, cut short when the run was killed: asked again
            kept.append(line)
        return kept

    @property
    def size(self) -> int:
        """How many replies it holds."""
        return len(self.replies)

    def get(self, i: int, k: int) -> tuple[ChatReply, float, float] | None:
        """Question i's k-th reply with its call's (start, end), or None."""
        return self.replies.get((i, k))

    def add(self, i: int, k: int, reply: ChatReply, start: float, end: float) -> None:
        if i in self.withheld:
            return
        entry = {"i": i, "k": k, "start": start, "end": end,
                 "reply": {"text": reply.text, "prompt_tokens": reply.prompt_tokens,
                           "completion_tokens": reply.completion_tokens,
                           "finish_reason": reply.finish_reason.value,
                           "error": redact_text(reply.error)}}
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()
        self.replies[(i, k)] = (reply, start, end)

    def close(self) -> None:
        self._file.close()
