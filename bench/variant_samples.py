"""Would the claim-1 variants have trained differently? (docs/claims.md) For each iteration of
a finished run, its batch (`build_batch`) and the estimator state saved before it are put through
the compute_advantages stage's arithmetic again (`tasks.batching.advantage_samples`): once with
the run's own config (which must give back the samples the run trained on: the check that the
recomputation is faithful) and once under each variant overlay (`configs/ablations/variants/`:
the estimator and its groups changed, nothing else). It counts the samples a variant would have
trained differently: a row it adds or leaves out, or one whose advantage differs. Where a
variant differs in no row of any batch, its run from the same seed would have trained the same
batches, hence the same run. Prints figures; asserts nothing; trains nothing.

    python bench/variant_samples.py runs/kuhn_greedy_memory_sbs [--variants a.yaml b.yaml]

Stateful estimators (RAE) start each batch from the run's saved state, which holds none of
theirs: their first batch's baseline, every time.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from mars_core.advantages.all_actions import COUNTERFACTUAL
from mars_core.config import ConfigError, load_config
from mars_core.run.checkpoint import load_estimator_state
from mars_core.run.layout import (BATCH_FILE, BUILD_BATCH, COMPUTE_ADVANTAGES, SAMPLES_FILE,
                                  SAVE_CHECKPOINT)
from tasks.batching import advantage_samples

VARIANTS = sorted(Path(__file__).resolve().parent.parent.glob("configs/ablations/variants/*.yaml"))
TOLERANCE = 1e-9


def _rows(samples: pl.DataFrame) -> dict[tuple, float]:
    """A sample's identity (its turn, whether added, the completion trained) -> its advantage."""
    added = samples[COUNTERFACTUAL] if COUNTERFACTUAL in samples.columns else [False] * len(samples)
    return {(t, bool(c), tuple(ids)): float(a) for t, c, ids, a in
            zip(samples["turn_id"], added, samples["completion_ids"], samples["advantage"])}


def differing(a: pl.DataFrame, b: pl.DataFrame) -> int:
    """Samples in one and not the other, or in both with advantages apart."""
    ra, rb = _rows(a), _rows(b)
    return (len(ra.keys() ^ rb.keys())
            + sum(abs(ra[k] - rb[k]) > TOLERANCE for k in ra.keys() & rb.keys()))


def iterations(run: Path) -> list[Path]:
    return sorted(p for p in run.glob("iter_*")
                  if (p / BUILD_BATCH / BATCH_FILE).is_file()
                  and (p / COMPUTE_ADVANTAGES / SAMPLES_FILE).is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder (runs/<name>) with its iterations")
    ap.add_argument("--variants", type=Path, nargs="+", default=VARIANTS,
                    help="variant overlays (default: configs/ablations/variants/*.yaml)")
    args = ap.parse_args(argv)
    try:
        if not (args.run / "config.yaml").is_file():
            raise ValueError(f"{args.run} has no config.yaml: not a run folder")
        own = load_config(args.run / "config.yaml").algorithm
        variants = {v.stem: load_config(args.run / "config.yaml", overlays=[str(v)]).algorithm
                    for v in args.variants}
    except (ConfigError, ValueError, OSError) as e:
        print(f"variant_samples: {e}", file=sys.stderr)
        return 2
    its = iterations(args.run)
    if not its:
        print(f"variant_samples: {args.run} has no iteration with a batch and its samples",
              file=sys.stderr)
        return 2
    print(f"{args.run}: train_actions {own.train_actions}, estimator {own.estimator} "
          f"{list(own.group_keys or ['its default groups'])}; samples each variant would have "
          "trained differently")
    names = ["own config", *variants]
    print("| iteration | samples | " + " | ".join(names) + " |")
    print("|---:|---:|" + "---:|" * len(names))
    totals = dict.fromkeys(names, 0)
    # and each variant against the first one (`grpo` by default: alphabetical), over all batches
    first = next(iter(variants), None)
    among = dict.fromkeys(variants, 0)
    n_samples = 0
    for it in its:
        k = int(it.name.split("_")[1])
        batch = pl.read_parquet(it / BUILD_BATCH / BATCH_FILE)
        state = load_estimator_state(args.run / f"iter_{k - 1:04d}" / SAVE_CHECKPOINT) if k else {}
        trained = pl.read_parquet(it / COMPUTE_ADVANTAGES / SAMPLES_FILE)
        n_samples += len(trained)
        row, mine = [], {}
        for name, a in (("own config", own), *variants.items()):
            mine[name] = advantage_samples(a, batch, state)[0]
            diff = differing(mine[name], trained)
            totals[name] += diff
            row.append(str(diff))
        for name in variants:
            among[name] += differing(mine[name], mine[first])
        print(f"| {k} | {len(trained)} | " + " | ".join(row) + " |")
    print(f"| all {len(its)} | {n_samples} | " + " | ".join(str(totals[n]) for n in names) + " |")
    if first is not None:
        print(f"against {first}, over all batches: "
              + ", ".join(f"{n} {among[n]}" for n in variants if n != first))
    return 0


if __name__ == "__main__":
    sys.exit(main())
