"""Registries an IDE can follow: games, game bots and advantage estimators are named by real
references (loaded on first use where the registry must stay a leaf), never by "module:Class"
strings resolved with importlib or getattr at run time."""
from __future__ import annotations

import re

import pytest

from mars_core.advantages import vectorised
from mars_core.advantages.estimators import ESTIMATORS
from mars_core.games.base import GameAdapter
from mars_core.run.layout import BUILD_PLAYERS
from mars_core.games.bots import GAME_BOT_CLASSES, make_bot
from mars_core.games.catalog import GAMES
from mars_core.games.opponents import GAME_BOTS
from mars_core.games.registry import ADAPTERS, game_class, make_game
from tests.conftest import REPO

REGISTRIES = ("mars_core/games/catalog.py", "mars_core/games/registry.py",
              "mars_core/games/opponents.py", "mars_core/games/bots.py",
              "mars_core/advantages/estimators.py")


def test_every_game_name_has_its_adapter_class():
    assert tuple(ADAPTERS) == GAMES
    for name in GAMES:
        cls = ADAPTERS[name]()
        assert issubclass(cls, GameAdapter) and game_class(name) is cls
        assert cls.__module__.startswith("mars_core.games.")


def test_every_game_bot_has_its_class_and_plays_its_game():
    assert set(GAME_BOT_CLASSES) == set(GAME_BOTS)
    for spec, game in GAME_BOTS.items():
        bot = make_bot(spec, make_game(game), seed=0)
        assert type(bot) is GAME_BOT_CLASSES[spec]
        assert bot.__module__ == ADAPTERS[game]().__module__  # the bot lives with its game


def test_estimator_records_refer_to_their_functions():
    for e in ESTIMATORS.values():
        assert e.fn is getattr(vectorised, e.fn.__name__)
        for ref in (e.step, e.metrics):
            assert ref is None or ref().__module__ == vectorised.__name__


def test_no_registry_resolves_a_name_at_run_time():
    dotted = re.compile(r"[\"']mars_core(\.\w+)+(:\w+)?[\"']")
    for path in REGISTRIES:
        text = (REPO / path).read_text()
        assert "import_module" not in text, path
        assert not re.search(r"getattr\((importlib|advantages|vectorised|module)\b", text), path
        assert not dotted.search(text), f"{path}: {dotted.search(text).group()}"


def test_every_game_table_is_read_from_the_game_records():
    from mars_core import postprocess
    from mars_core.games.catalog import CATALOG, MARS_GAMES, MINDGAMES
    from mars_core.games.opponents import DEFAULT_OPPONENTS, MARS_OPPONENTS, MINDGAMES_OPPONENTS

    assert tuple(g.name for g in CATALOG) == GAMES == tuple(postprocess.PIPELINES)
    assert DEFAULT_OPPONENTS == {g.name: g.opponents for g in CATALOG}
    assert DEFAULT_OPPONENTS == MARS_OPPONENTS | MINDGAMES_OPPONENTS
    assert set(MARS_GAMES) == {g.name for g in CATALOG if g.family == "openspiel"}
    assert set(MINDGAMES) == {g.name for g in CATALOG if g.family == "textarena"}
    for g in CATALOG:
        assert postprocess.PIPELINES[g.name].__name__ == f"mars_core.postprocess.{g.pipeline}"


def test_a_game_record_that_cannot_be_read_is_refused_in_one_line():
    import dataclasses

    from mars_core import postprocess
    from mars_core.games import catalog

    kuhn, blotto = catalog.CATALOG[1], catalog.CATALOG[6]
    for bad, match in [((dataclasses.replace(kuhn, family="chess"),), "has family 'chess'"),
                       ((dataclasses.replace(kuhn, suite="mars"),), "has suite 'mars'"),
                       ((dataclasses.replace(kuhn, opponents=()),), "has no opponents"),
                       ((kuhn, kuhn), "'kuhn_poker' is recorded twice"),
                       ((dataclasses.replace(kuhn, bots=(("focus", None),)),), "bot 'focus' must"),
                       ((blotto, dataclasses.replace(blotto, name="blotto_2")),
                        "blotto_2's bot 'bot:blotto-focus' must start with 'bot:' and play one")]:
        with pytest.raises(ValueError, match=match):
            catalog._check_catalog(bad)
    with pytest.raises(ValueError, match="game nim: no post-episode pipeline 'nim'"):
        postprocess._pipeline_module("nim", "nim")
    with pytest.raises(ValueError, match=f"pipeline 'common' lacks {BUILD_PLAYERS}"):
        postprocess._pipeline_module("nim", "common")


def test_the_games_package_imports_a_module_when_first_asked_and_knows_no_other_name():
    import mars_core.games as games

    assert games.poker.KuhnPoker is game_class("kuhn_poker")
    assert not hasattr(games, "chess")
