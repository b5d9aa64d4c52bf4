"""`mars replay`: one episode as a self-contained HTML page, to step through turn by turn.

RUN is a run directory (its newest iteration, or `--iteration K`), an `iter_XXXX` folder, any
folder with `episodes.parquet` + `turns.parquet` (an arena's output, a run's `replays/`), or an
MLflow artifact URI (`runs:/<run_id>/replays/iter_0001`, `runs:/<run_id>/iter_0001` for the
logged episode sample, `mlflow-artifacts:/...`) that is downloaded to a temporary folder first.
A file tool: no Prefect, no model.
"""
from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")  # a scheme of 2+ letters (not C:/...)
SHOWN_IDS = 5  # episode ids named in messages


def add_parser(sub) -> None:
    r = sub.add_parser("replay", help="write one episode as an HTML page to step through")
    r.add_argument("run", metavar="RUN",
                   help="a run dir, an iter_XXXX folder, a folder with episodes.parquet + "
                        "turns.parquet, or an MLflow artifact URI (runs:/ID/PATH)")
    r.add_argument("--episode", default=None, help="episode id (default: the first one)")
    r.add_argument("--iteration", type=int, default=None,
                   help="iteration of a run dir (default: the newest)")
    r.add_argument("--out", default=None, help="HTML file (default: replay-<episode>.html)")
    r.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI for runs:/ URIs (default: $MLFLOW_TRACKING_URI, "
                        "else sqlite:///<runs-dir>/mlflow.db)")
    r.add_argument("--runs-dir", default="runs", help="where runs live (default: runs)")


def check(args: argparse.Namespace) -> None:
    """Refuse what is wrong before anything is read or downloaded (ConfigError, one line)."""
    from mars_core.config import ConfigError

    if args.iteration is not None and args.iteration < 0:
        raise ConfigError(f"--iteration must be at least 0, got {args.iteration}")
    if args.run.startswith("models:/"):
        raise ConfigError("RUN: models:/ URIs hold models, not episodes; give a run folder or "
                          "runs:/<run_id>/<path>")
    if not _URI.match(args.run) and not Path(args.run).is_dir():
        raise ConfigError(f"RUN: no such folder: {args.run}")
    if args.out is not None and not Path(args.out).absolute().parent.is_dir():
        raise ConfigError(f"--out folder does not exist: {Path(args.out).parent}")


def run(args: argparse.Namespace) -> dict:
    """Load RUN's episodes, write the chosen one's page. Returns `out`, `episode_id`, `count`
    and `note` (which episode this is and which others exist)."""
    from mars_core.config import ConfigError

    try:
        if not _URI.match(args.run):
            return _write(args, Path(args.run))
        with tempfile.TemporaryDirectory(prefix="mars-replay-") as tmp:
            return _write(args, _download(args, Path(tmp)))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _download(args: argparse.Namespace, dst: Path) -> Path:
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    from mars_core.config import ConfigError
    from tasks.tracking import tracking_uri

    tracking = args.tracking_uri or tracking_uri(Path(args.runs_dir))
    try:
        got = Path(mlflow.artifacts.download_artifacts(artifact_uri=args.run, dst_path=str(dst),
                                                       tracking_uri=tracking))
    except (MlflowException, OSError) as e:
        line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"cannot download {args.run} from {tracking}: {line}") from None
    return got if got.is_dir() else got.parent


def _write(args: argparse.Namespace, folder: Path) -> dict:
    from mars_core.config import ConfigError
    from mars_core.viewer.replay import load_replays, page_name, replay_data, replay_html

    replays = load_replays(folder, args.iteration)
    ids = [r.episode.episode_id for r in replays]
    if args.episode is None:
        chosen = replays[0]
        others = ids[1:SHOWN_IDS + 1]
        note = (f"episode {ids[0]} (1 of {len(ids)}); others: {', '.join(others)}"
                f"{', ...' if len(ids) > SHOWN_IDS + 1 else ''}; choose with --episode ID"
                if others else f"episode {ids[0]} (the only one)")
    else:
        if args.episode not in ids:
            raise ConfigError(f"--episode: no episode {args.episode!r} in {args.run}; "
                              f"{len(ids)} there, e.g. {', '.join(ids[:SHOWN_IDS])}")
        chosen = replays[ids.index(args.episode)]
        note = f"episode {args.episode} ({ids.index(args.episode) + 1} of {len(ids)})"
    ep = chosen.episode
    where = f" · iteration {chosen.iteration}" if chosen.iteration is not None else ""
    out = Path(args.out or f"replay-{page_name(ep.episode_id)}")
    out.write_text(replay_html(replay_data(ep, chosen.advantages), f"{ep.game} · {ep.episode_id}"
                               f"{where}"), encoding="utf-8")
    return {"out": str(out), "episode_id": ep.episode_id, "count": len(ids), "note": note}


def done(args: argparse.Namespace, result: dict) -> str:
    return f"mars: {result['note']}\nmars: done: {result['out']}"
