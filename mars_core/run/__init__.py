"""Run: a training run's folder and the machinery that keeps it whole.

- `layout`: the stages in the order they run, their inputs (`STAGE_INPUTS`), folder and file
  names, the episode Parquet codec: the DAG, in one place;
- `commit`: the commit protocol (a stage writes `<stage>.partial/`, renames it when done);
- `checkpoint`: a loadable model folder plus the trainer and estimator state;
- `seeds`: the run's random streams, one per decision that draws;
- `procgroup`: process groups that never outlive the pipeline (vLLM server, DeepSpeed launcher);
- `offline`: the environment every process of ours runs under (hub offline, telemetry off);
- `memory`: a stage's peak resident memory (`memory/<stage>_peak_rss_gib`).

May import: models, types, vocab.
"""
