"""The comparison flow: train several presets the same way, evaluate every final model on one
strategic suite, and log one table (the MARS paper's Table 4 layout) to MLflow:

    for each preset: train (a subflow; resumes a finished or interrupted run)
    evaluate the start policy and every final model on the evaluation preset
    comparison.json / comparison.md / radar chart -> one MLflow run in `experiment`

Rerunning the same command skips finished trainings and evaluations, so an interrupted
comparison continues where it stopped.

With seeds (`ablation_flow`, `mars compare --seeds 0,1,2`, `make ablate`): every variant (an
overlay, `configs/ablations/variants/`) laid over every base preset (default: the Kuhn Poker and
Tic-Tac-Toe learning recipes) trains once per seed (`run.seed`), as runs
`<name>-<base>-<variant>-s<seed>`; each run's own evaluations give its final strength and its
learning curve (within a seed every variant plays the same evaluation deals), and
`mars_core.strength.ablation` aggregates them over seeds (intervals over seeds, differences from the
first variant paired by seed and by deal) into `<name>-compare/ablation.{md,json,png}`, one
MLflow parent run with a child per run (`tasks.ablation`) and a Prefect Markdown artifact.
A finished run is skipped without starting its training flow: a cut comparison redoes only
the runs it had not finished (each of those resumes at its first unfinished stage).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from prefect import flow

from mars_core.strength.ablation import (ablation_markdown, ablation_plot, ablation_rows,
                                         add_gains, curve_bands, per_seed_rows)
from mars_core.config import load_config, load_game_eval_config
from mars_core.privacy.private import reveal, withheld
from mars_core.privacy.redact import install_log_redaction
from mars_core.strength.suite import comparison_table, per_game_normalized, radar_chart
from mars_core.run.layout import (EVALUATE, FINAL, INIT, REGISTERED_FILE, STRENGTH,
                                  STRENGTH_JSON, final_model_dir, read_episodes, stage_dir)
from mars_core.run.commit import MARKER, is_done, read_json, stage_output, write_json
from flows.train import train_flow
from tasks.ablation import log_ablation
from tasks.artifacts import publish_markdown, publish_table
from tasks.policies import initial_policy
from tasks.strength import learning_curve
from tasks.paths import check_run_dir, check_run_name, lock_run_dir, run_dir_for, unlock_run_dir
from tasks.strength_suite import evaluate_suite
from tasks.tracking import ensure_run, log_comparison, set_terminated, tracking_uri

ABLATIONS = tuple(f"configs/ablations/{p}.yaml" for p in (
    "mars", "wo_turn_level", "wo_agent_specific", "grpo", "rae", "fixed_opponent"))
# `--seeds`: the variants (overlays; the first is the reference) and the presets they change
VARIANTS = tuple(f"configs/ablations/variants/{v}.yaml" for v in (
    "mars", "wo_turn_level", "wo_agent_specific", "grpo", "rae"))
# the default: Kuhn with the method's update, cut at its plateau (the comparison in <= 4 h here)
ABLATE_BASES = ("configs/ablations/bases/kuhn_short.yaml",)
# the learning recipes at their own scale (`--bases`; ~28 h for three seeds on 2 cores)
LEARNING_BASES = ("configs/lab/kuhn_ppo.yaml", "configs/learning/tic_tac_toe.yaml")


def evaluation_key(cfg, model: str) -> str:
    """What decides an evaluation's records: the whole evaluation config (suite, n, seed, how
    the policy plays) and the weights (the model folder and its stage manifest, which hashes
    every file). A change in any of them is another cache entry, never a stale reuse."""
    model_dir = Path(model)
    marker = model_dir / MARKER
    ident = {"eval": cfg.model_dump(mode="json"), "model": str(model_dir.resolve()),
             "weights": marker.read_text() if marker.is_file() else None}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def _evaluated(folder: Path, cfg, label: str, model: str) -> list[dict]:
    """The records of one policy, evaluated once per evaluation key (kept in
    `folder-<key>`, reused on a rerun with the same settings and weights)."""
    folder = folder.with_name(f"{folder.name}-{evaluation_key(cfg, model)}")
    if not is_done(folder):
        with stage_output(folder) as out:
            write_json(out / "records.json", evaluate_suite(cfg, label, model)["records"])
    return read_json(folder / "records.json")


@flow(name="mars-compare", log_prints=True)
def compare_flow(presets: list[str] | None = None, overlays: list[str] | None = None,
                 overrides: list[str] | None = None,
                 eval_preset: str = "configs/eval/mars_strategic_quick.yaml",
                 games: list[str] | None = None, n: int | None = None, name: str = "ablations",
                 runs_dir: str = "runs", experiment: str = "mars-ablations",
                 private: str | None = None) -> dict:
    """Train each of `presets` (default: the four ablations) with the same `overlays` (e.g.
    configs/scales/smoke.yaml) and `overrides` (secrets masked, their values in the file
    `private`: `mars_core.privacy.private`), as runs `<name>-<preset>`; evaluate on `eval_preset`
    (narrowed to `games`, `n` games per seat); log the table."""
    install_log_redaction()
    shown = list(overrides or [])
    reveal(private, overrides=shown)  # refuses a secret given in clear
    presets = list(presets or ABLATIONS)
    labels = [Path(p).stem for p in presets]
    if len(set(labels)) != len(labels):
        raise ValueError("compare: two presets share a file name; rename one")
    folder = run_dir_for(runs_dir, f"{name}-compare", "--name")
    for label in labels:
        check_run_name(f"{name}-{label}", "a preset's run name (--name plus its file name)")
    ecfg = load_game_eval_config(eval_preset, games, None, n, None)
    trained = {}
    for preset, label in zip(presets, labels):
        # the subflow's parameters are stored too: the masked overrides and the same file
        result = train_flow(config=preset, run_name=f"{name}-{label}", runs_dir=runs_dir,
                            overrides=shown, overlays=overlays or [], private=private)
        trained[label] = result
    first = trained[labels[0]]["run_dir"]
    policies = {"start": initial_policy(first, INIT, reader=EVALUATE)}  # as init/ evaluates it
    policies |= {label: str(final_model_dir(r["run_dir"])) for label, r in trained.items()}
    lock_run_dir(folder)  # one comparison per folder at a time
    try:
        scores = {label: per_game_normalized(_evaluated(folder / f"eval_{label}", ecfg, label, m))
                  for label, m in policies.items()}
        rows, markdown = comparison_table(scores)
        files = [folder / "comparison.json", folder / "comparison.md",
                 folder / "comparison_radar.png"]
        write_json(files[0], rows)
        files[1].write_text(f"# {name}: normalized return per game (0-100)\n\n{markdown}")
        radar_chart(scores, files[2], title=f"{name}: normalized return")
    finally:
        unlock_run_dir(folder)
    print(f"comparison ({ecfg.n} games per game x opponent x seat):\n{markdown}")
    params = {"presets": ",".join(presets), "overlays": ",".join(overlays or []),
              "overrides": ",".join(shown), "eval_preset": eval_preset,
              "eval.n": ecfg.n, "eval.games": ",".join(ecfg.suite), "eval.seed": ecfg.seed,
              **{f"run.{label}": r["mlflow_run_id"] for label, r in trained.items()}}
    run_id = log_comparison(tracking_uri(Path(runs_dir)), experiment, name, params, rows, files)
    print(f"logged the table to MLflow run {run_id} (experiment {experiment!r})")
    publish_table(f"compare-{name}", rows, f"{name}: normalized return per game (0-100)",
                  tracking_uri(Path(runs_dir)), run_id)
    return {"table": rows, "markdown": markdown, "mlflow_run_id": run_id,
            "runs": {label: r["run_dir"] for label, r in trained.items()}}


# ---------------------------------------------------------------------------------------------
# Across seeds: variants laid over base presets, each trained once per seed


def ablation_runs(bases: list[str], variants: list[str], seeds: list[int],
                  name: str) -> list[tuple[str, str, int, str]]:
    """(base, variant, seed, run name) in the order they train: seed by seed, so a comparison
    cut short has its first seeds whole."""
    return [(base, variant, seed, f"{name}-{Path(base).stem}-{Path(variant).stem}-s{seed}")
            for seed in seeds for base in bases for variant in variants]


def run_overrides(name: str, base: str, variant: str, seed: int, experiment: str,
                  n: int | None) -> list[str]:
    """What the comparison sets on every run, after the user's overrides: the seed, the MLflow
    experiment, a registered model of its own per (base, variant) (never the recipe's, whose
    `candidate` alias it would move), and `n` evaluation games per seat where given."""
    sets = [f"run.seed={seed}", f"tracking.experiment={experiment}",
            f"tracking.registered_model={name}-{Path(base).stem}-{Path(variant).stem}"]
    return sets + ([f"evaluation.games_per_seat={n}"] if n else [])


def read_strength(folder: Path) -> list[dict]:
    """A run's start-vs-final rows (`final/strength/`), or none where it has no start
    evaluation."""
    return read_json(folder / STRENGTH_JSON) if is_done(folder) else []


def run_finished(run_dir: Path, cfg) -> bool:
    """A run whose training flow has nothing left to do: its final model registered, its last
    evaluation and (with a start evaluation) the start-vs-final comparison written."""
    return ((run_dir / REGISTERED_FILE).is_file()
            and is_done(stage_dir(run_dir, cfg.run.iterations - 1, EVALUATE))
            and (not cfg.evaluation.at_start or is_done(stage_dir(run_dir, FINAL, STRENGTH))))


@flow(name="mars-ablate", log_prints=True)
def ablation_flow(seeds: list[int], bases: list[str] | None = None,
                  variants: list[str] | None = None, overlays: list[str] | None = None,
                  overrides: list[str] | None = None, n: int | None = None,
                  name: str = "ablate", runs_dir: str = "runs",
                  experiment: str = "mars-ablations", private: str | None = None) -> dict:
    """Train every variant over every base once per seed (finished runs skipped), then
    aggregate their final evaluations and learning curves over seeds against the first
    variant; the table, JSON and plot in `<runs_dir>/<name>-compare/`, logged to MLflow
    (`experiment`: one parent run, a child per run) and as a Prefect Markdown artifact."""
    install_log_redaction()
    shown = list(overrides or [])
    real = reveal(private, overrides=shown)["overrides"]
    bases, variants = list(bases or ABLATE_BASES), list(variants or VARIANTS)
    reference = Path(variants[0]).stem
    folder = run_dir_for(runs_dir, f"{name}-compare", "--name")
    runs = []
    for base, variant, seed, run_name in ablation_runs(bases, variants, seeds, name):
        layers = [*(overlays or []), variant]  # the variant last: a scale never undoes it
        sets = [*real, *run_overrides(name, base, variant, seed, experiment, n)]
        run_dir = run_dir_for(runs_dir, run_name, "a run name (--name, base, variant, seed)")
        cfg = load_config(base, sets, overlays=layers)
        if run_finished(run_dir, cfg):
            check_run_dir(run_dir, cfg)  # made with this config, or one line saying it was not
            run_id = ensure_run(run_dir)
            set_terminated(run_dir, run_id)  # a run cut after its last stage: closed now
            print(f"{run_name}: finished before, skipped")
        else:
            with withheld(overrides=sets) as hidden:  # the secrets stay out of the parameters
                run_id = train_flow(config=base, run_name=run_name, runs_dir=runs_dir,
                                    overlays=layers, **hidden)["mlflow_run_id"]
        runs.append({"name": run_name, "base": Path(base).stem, "variant": Path(variant).stem,
                     "seed": seed, "run_dir": str(run_dir), "mlflow_run_id": run_id,
                     "final": stage_dir(run_dir, cfg.run.iterations - 1, EVALUATE),
                     "strength": stage_dir(run_dir, FINAL, STRENGTH)})
    lock_run_dir(folder)  # one comparison per folder at a time
    try:
        seed_rows = []
        for (base, seed) in dict.fromkeys((r["base"], r["seed"]) for r in runs):
            mine = [r for r in runs if (r["base"], r["seed"]) == (base, seed)]
            rows = per_seed_rows({r["variant"]: read_episodes(r["final"]) for r in mine},
                                 reference)
            for r in mine:
                r["rows"] = add_gains([x for x in rows if x["policy"] == r["variant"]],
                                      read_strength(r["strength"]))
                r["curve"] = learning_curve(r["run_dir"])
                seed_rows += [{**x, "base": base, "seed": seed} for x in r["rows"]]
        rows = ablation_rows(seed_rows, reference)
        bands = curve_bands({(r["base"], r["variant"], r["seed"]): r["curve"] for r in runs})
        markdown = ablation_markdown(rows, reference)
        files = [folder / "ablation.json", folder / "ablation.md", folder / "ablation.png"]
        write_json(files[0], {"reference": reference, "seeds": list(seeds), "rows": rows,
                              "curves": bands, "per_seed": seed_rows})
        files[1].write_text(f"# {name}: strength after training, across seeds\n\n{markdown}")
        ablation_plot(rows, bands, files[2], title=f"{name}: {len(seeds)} seeds")
    finally:
        unlock_run_dir(folder)
    print(f"comparison over seeds {','.join(map(str, seeds))}:\n{markdown}")
    params = {"seeds": ",".join(map(str, seeds)), "bases": ",".join(bases),
              "variants": ",".join(variants), "reference": reference,
              "overlays": ",".join(overlays or []), "overrides": ",".join(shown), "n": n}
    store = tracking_uri(Path(runs_dir))
    children = [{k: v for k, v in r.items() if k not in ("final", "strength", "name")}
                for r in runs]
    run_id = log_ablation(store, experiment, name, reference, params, rows, children, files)
    print(f"logged the comparison to MLflow run {run_id} (experiment {experiment!r})")
    publish_markdown(f"ablation-{name}", markdown,
                     f"{name}: strength after training, across seeds", store, run_id)
    return {"rows": rows, "markdown": markdown, "mlflow_run_id": run_id,
            "runs": {r["name"]: r["run_dir"] for r in runs}}
