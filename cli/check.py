"""`mars check CONFIG`: a preset checked and its plan printed, without running anything.

The preset (a training preset, an evaluation preset with a `suite`, or an arena preset with
`agents` or `references`), its overlays and `--set` overrides are loaded and validated as the
command that runs it would load them; every model it names is checked (a local folder that
exists and reads whole, the embedded model's package, the form of a `models:/NAME@ALIAS` URI;
the registry itself is not opened); then the plan is printed: for a training preset the stages
of the run in order (`mars_core.run.layout.STAGES`), the games and opponents, and the games
and evaluations per iteration and in all. Nothing is written: no run folder, no MLflow run, no
Prefect flow run (this command starts no server). Bad input is the usual one line, exit 2.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from cli import options

_REGISTRY_NOTE = "form checked; the registry is looked up when a command uses it"


def add_parser(sub) -> None:
    c = sub.add_parser("check", help="validate a preset (overlays, --set) and print its plan; "
                                     "writes nothing")
    c.add_argument("config", nargs="?", default=None, metavar="CONFIG",
                   help="YAML preset: training (configs/demo.yaml), evaluation (configs/eval/"
                        "...) or arena (configs/arena/...)")
    c.add_argument("--config", dest="config_flag", default=None, metavar="CONFIG",
                   help="the same, as `mars train` takes it (so a train command line with "
                        "`train` replaced by `check` checks that run)")
    c.add_argument("--runs-dir", default="runs",
                   help="where runs live (default: runs): says whether the run is new, "
                        "resumes, or is in use by a run in progress")
    c.add_argument("--run-name", default=None, help="run folder name (default: the preset's name)")
    options.overlays(c)
    options.overrides(c, "rollout.temperature=0.8")


def _config_path(args: argparse.Namespace) -> str:
    from mars_core.config import ConfigError

    if args.config and args.config_flag and args.config != args.config_flag:
        raise ConfigError(f"two presets given ({args.config} and --config {args.config_flag}): "
                          "give one")
    path = args.config or args.config_flag
    if not path:
        raise ConfigError("no preset to check: mars check CONFIG (e.g. configs/demo.yaml)")
    return path


def kind_of(path: str) -> str:
    """`train`, `game_eval` (a game-evaluation preset: it has a `suite`) or `arena` (it has
    `agents`, or `references`: a frozen pool): the keys decide, since every config section
    refuses keys it does not know."""
    from mars_core.config import read_preset

    data = read_preset(path)
    if "suite" in data:
        return "game_eval"
    if "agents" in data or "references" in data:
        return "arena"
    return "train"


def check(args: argparse.Namespace) -> None:
    """Everything `run` needs, loaded and refused in one line; `args.plan` keeps it."""
    from mars_core.config import ConfigError

    path = _config_path(args)
    kind = kind_of(path)
    if kind != "train" and args.overlays:
        raise ConfigError(f"--overlay: overlays are for training presets; {path} is an "
                          f"{'evaluation' if kind == 'game_eval' else 'arena'} preset")
    plans = {"train": _train_plan, "game_eval": _game_eval_plan, "arena": _arena_plan}
    args.plan = plans[kind](path, args)


def run(args: argparse.Namespace) -> dict:
    return {"lines": args.plan}


def done(args: argparse.Namespace, result: dict) -> str:
    return "\n".join(result["lines"])


# -- models -------------------------------------------------------------------------------------
def model_line(spec: str, what: str) -> str:
    """A model reference checked without writing anything: what it is (credentials in a URL
    masked), or a one-line error. Games are played in this process: an endpoint URL is no
    model here (as `mars arena` refuses it)."""
    from mars_core.config import ConfigError
    from mars_core.engines.chat import is_endpoint
    from mars_core.games.opponents import is_bot
    from mars_core.models.weights import (EMBEDDED_DIRNAME, MARKER, check_model_folder,
                                          default_cache_dir, embedded_gguf_path, resolve_model)
    from mars_core.privacy.redact import redact_text
    from tasks.model_registry import MODEL_URI

    if is_bot(spec):
        return f"{what}: {spec} (a bot)"
    if spec == "embedded":
        gguf = embedded_gguf_path()  # ModelError when the package is missing
        cached = default_cache_dir() / EMBEDDED_DIRNAME
        state = (f"converted in {cached}" if (cached / MARKER).is_file()
                 else "converted to a folder in the cache on first use")
        return f"{what}: embedded ({gguf.name}, {state})"
    if spec.startswith("models:/"):
        if not MODEL_URI.match(spec):
            raise ConfigError(f"{what}: bad model URI {spec!r}: use models:/NAME@ALIAS or "
                              "models:/NAME/VERSION")
        return f"{what}: {spec} (registered model; {_REGISTRY_NOTE})"
    if is_endpoint(spec):
        raise ConfigError(f"{what}: an endpoint URL ({redact_text(spec)}) cannot play games "
                          "here; give a model folder, a hub id, embedded or a models:/ URI")
    found = resolve_model(spec)  # a folder that exists, or a hub id the hub cache has
    check_model_folder(found)
    kind = "a hub model" if isinstance(found, str) else "a model folder, read whole"
    return f"{what}: {found} ({kind})"


def _cluster_lines(cluster) -> list[str]:
    """The shards and the Ray address; an address is checked as `mars train` checks it (it
    answers on TCP, a Prefect server is configured), without connecting to Ray."""
    if not cluster.sharded:
        return []
    address = cluster.ray.address
    if address is not None:
        from cli.checks import check_prefect_server
        from tasks.shards import reachable

        reachable(address)
        check_prefect_server(address)
    from mars_core.privacy.redact import redact_text

    where = f"on the Ray cluster at {redact_text(address)}" if address else "in this process"
    return [f"shards: {cluster.shards} per stage that plays games, {where}"]


# -- training -----------------------------------------------------------------------------------
def _train_plan(path: str, args: argparse.Namespace) -> list[str]:
    from mars_core.config import load_config
    from tasks.paths import check_run_dir, check_run_name, run_dir_holder

    given = args.run_name is not None
    name = check_run_name(args.run_name if given else Path(path).stem,
                          "--run-name" if given else "the preset's file name (give --run-name)")
    cfg = load_config(path, args.overrides, overlays=args.overlays)
    lines = [f"mars check: {_given(path, args)}: a valid training preset"]
    lines.append(model_line(cfg.model.path, "model"))
    run_dir = Path(args.runs_dir) / name
    diff = check_run_dir(run_dir, cfg)  # reads only: a folder of another config is refused
    holder = run_dir_holder(run_dir)  # a run in progress (its lock held), read only
    verb = "creates" if diff is None else "resumes"
    then = (f"`mars train` {verb} it" if holder is None else
            f"in use by {holder}: `mars train` refuses it until that run ends, then {verb} it")
    lines.append(f"run folder: {run_dir} ("
                 + (f"new: {then}" if diff is None else
                    f"exists with this config: {then}" if not diff else
                    f"exists with this config but for {', '.join(diff)} (changes that leave "
                    f"the results alone): {then}") + ")")
    lines += _cluster_lines(cfg.cluster)
    from cli.plan import training_plan

    return lines + training_plan(cfg)


def _given(path: str, args: argparse.Namespace) -> str:
    extra = [f"--overlay {o}" for o in args.overlays] + [f"--set {s.split('=', 1)[0]}=..."
                                                         for s in args.overrides]
    return " ".join([path, *extra])


# -- evaluation and arena presets ---------------------------------------------------------------
def _game_eval_plan(path: str, args: argparse.Namespace) -> list[str]:
    from cli.plan import game_eval_plan
    from mars_core.config import load_game_eval_config

    cfg = load_game_eval_config(path, overrides=args.overrides)
    return ([f"mars check: {_given(path, args)}: a valid game-evaluation preset "
             "(`mars eval games --preset`)"] + _cluster_lines(cfg.cluster)
            + game_eval_plan(cfg))


def _arena_plan(path: str, args: argparse.Namespace) -> list[str]:
    from cli.plan import arena_plan
    from mars_core.arena.config import check_agents, load_arena_config, load_pool
    from mars_core.config import ConfigError, read_preset

    pool = "references" in read_preset(path)
    try:
        cfg = load_pool(path, args.overrides) if pool else load_arena_config(path,
                                                                             args.overrides)
        agents = cfg.labelled()
        if not pool and agents:
            check_agents(agents, cfg.games)
    except ValueError as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    what = "a frozen reference pool (`mars arena --reference`)" if pool else \
        "an arena preset (`mars arena --preset`)"
    lines = [f"mars check: {_given(path, args)}: {what}"]
    lines += [model_line(spec, f"agent {label}") for label, spec in agents.items()]
    return lines + _cluster_lines(cfg.cluster) + arena_plan(cfg, pool)
