"""The replay page in a real browser (headless Chromium through Playwright): stepping with the
buttons, the keys and the timeline, the gate badge on a gated step, no request leaving the
file, and a screenshot for people to look at (`test-artifacts/replay.png`).

Skipped without /usr/bin/chromium, except under MARS_REQUIRE_BROWSER=1 (CI), where a missing
browser is a failure."""
from __future__ import annotations

import os
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from mars_core.viewer.replay import replay_data, replay_html
from mars_core.rollout.play import EpisodeSpec, play_episodes
from mars_core.types import SamplingParams
from tests.conftest import REPO

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOT = REPO / "test-artifacts" / "replay.png"
GATED_TURN = 2  # 0-based turn index of the gated step in the second episode


def _require_browser():
    """Playwright's sync API, or a skip (a failure when the environment requires a browser)."""
    missing = None if Path(CHROMIUM).is_file() else f"{CHROMIUM} not found (apt install chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = missing or "playwright is not installed (the dev extra)"
    if missing:
        if os.environ.get("MARS_REQUIRE_BROWSER") == "1":
            pytest.fail(f"MARS_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    return sync_playwright


def _page(tmp_path: Path) -> tuple[Path, int]:
    """Two episodes of one page: a real bot game, and the same game with reasoning in its
    replies, advantages and one gated step."""
    spec = EpisodeSpec("ttt-demo", "tic_tac_toe", 3, ("bot:random", "bot:mcts-10"))
    real = play_episodes([spec], None, None, SamplingParams(), progress=False)[0]
    thoughts = ["<think>\nThe centre and corners are strongest; I take the one that also blocks "
                f"the opponent's line.\n</think>\nMove {t.turn + 1}: playing {t.action}. "
                for t in real.turns]
    turns = [replace(t, episode_id="ttt-gated", reply=thought + t.reply, format_reward=0.05,
                     reward=t.game_reward + 0.05) for t, thought in zip(real.turns, thoughts)]
    turns[GATED_TURN] = replace(turns[GATED_TURN], eligible=False,
                                gate_reason="depends_on_invalid_step")
    shown = replace(real, episode_id="ttt-gated", turns=tuple(turns))
    advantages = {t.turn: round(0.4 - 0.15 * t.turn, 3) for t in turns}
    page = tmp_path / "replay.html"
    page.write_text(replay_html([replay_data(real), replay_data(shown, advantages)],
                                "tic_tac_toe: bot:random vs bot:mcts-10"), encoding="utf-8")
    return page, len(real.turns)


def test_stepping_through_an_episode_in_chromium(tmp_path):
    sync_playwright = _require_browser()
    page_file, n = _page(tmp_path)
    requests, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            context = browser.new_context(viewport={"width": 1366, "height": 820})
            context.route("**/*", lambda route: route.continue_()
                          if route.request.url.startswith(("file://", "data:")) else route.abort())
            page = context.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_file.as_uri())
            def label():
                return page.inner_text("#step-label")

            def board():
                return page.inner_text("#board")
            assert label() == f"turn 1 / {n}"
            first = board()
            page.click("#next")
            assert label() == f"turn 2 / {n}" and board() != first
            page.click("#prev")
            assert label() == f"turn 1 / {n}" and board() == first
            page.keyboard.press("ArrowRight")
            assert label() == f"turn 2 / {n}"
            page.keyboard.press("ArrowLeft")
            assert label() == f"turn 1 / {n}" and board() == first
            page.click("#timeline button:last-child")
            assert label() == f"end · {n} turns"
            assert page.text_content("#board-title") == "Final board"
            assert not page.is_visible("#gate")

            page.select_option("#episode", index=1)
            assert label() == f"turn 1 / {n}" and not page.is_visible("#gate")
            assert "centre and corners" in page.inner_text("#reasoning")
            assert page.inner_text("#advantage") == "advantage: 0.4"
            page.click(f"#timeline button:nth-child({GATED_TURN + 1})")
            assert label() == f"turn {GATED_TURN + 1} / {n}"
            assert page.is_visible("#gate")
            assert page.inner_text("#gate") == "filtered: depends_on_invalid_step"
            assert page.inner_text("#action").startswith("<")
            SHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SHOT), full_page=True)
            page.keyboard.press("ArrowRight")
            assert not page.is_visible("#gate")
        finally:
            browser.close()
    assert not errors, errors
    assert requests and all(u.startswith(("file://", "data:")) for u in requests), requests
    data = SHOT.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 1300 and height >= 500
