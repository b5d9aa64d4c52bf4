"""Viewer: episode replays as self-contained HTML pages (the replays stage, `mars replay`).
Not a replay buffer: the episodes a run trains on are in `batching.bank`.

- `replay`: load stored episodes and render one page per episode, turn by turn;
- `page`: the page's template (HTML, CSS and vanilla JS in one string, no network).

May import: games, run, types, vocab.
"""
