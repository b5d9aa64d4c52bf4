"""Games: the rules of every game the project plays, and its opponents.

- `catalog`: the games, one record each (a leaf: config checks read it), from which the other
  tables are read; `registry`: the adapters, built on first use; `base`: the adapter interface
  and the answer format;
- one module per game family (`board_games`, `poker`, `hanabi`, `blotto`, `ipd`, `codenames`,
  `mafia`, `openspiel_games`, `textarena_games`), `nash` (equilibrium tables);
- any engine game by name: `openspiel_generic` (`openspiel:<name>`), `textarena_generic`
  (`textarena:<EnvId>`); `listing`: every playable game (`mars games`);
- `opponents`: who can sit at a seat (bots, frozen checkpoints), `bots`: the bots' moves.

A module of this package is also an attribute of it, imported on first use
(`games.poker.KuhnPoker` loads `poker` and its engine then): the catalog names each adapter
class that way without loading an engine.

May import: types, vocab.
"""
from __future__ import annotations

from importlib import import_module


def __getattr__(name: str):
    """`mars_core.games.<module>`, imported when first asked for (PEP 562)."""
    try:
        return import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
