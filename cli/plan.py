"""The plan `mars check` prints: what a validated config will run, counted from the config alone
(pure: nothing is loaded but the game adapters, for their number of seats; nothing written).

Training: the stages in the order a run writes them (`mars_core.run.layout.STAGES`), the games
and who sits across the policy, the games per iteration and the evaluations, counted as the
flows count them: `rollout.episodes_per_iteration` games per iteration split over the games as
the environment sampler splits them; an evaluation plays `evaluation.games_per_seat` games per
game x opponent x seat (a `self` opponent: one seating), the start policy's when
`evaluation.at_start`, then after every `evaluation.every`-th iteration and after the last;
the format warm-up's probe plays `warmup.probe_games` self-play games before its steps and
again after them. What the run reproduces across shard layouts, engine batch sizes and resumes
(`reproducible_line`: the precision `model.bf16` resolves to on this machine, measured once and
cached, and `model.batch_invariant`).
"""
from __future__ import annotations

import random
from collections import Counter

from mars_core.games.registry import make_game
from mars_core.run import layout
from mars_core.vocab import SELF


def seats(game: str) -> int:
    return make_game(game).num_players


def suite_games(suite: dict, n: int) -> int:
    """Games of one pass over `suite` (game -> opponents), n per game x opponent x seat."""
    return sum(n * (1 if opp == SELF else seats(game)) for game, opps in suite.items()
               for opp in opps)


def evaluated_after(iterations: int, every: int) -> list[int]:
    """The iterations (1-based: iterations trained) after which a run evaluates (train_flow).
    The plan counts every iteration so: iteration k is the folder `iter_{k-1}`, and a
    curriculum stage's `unlock_at` (0-based: the first iteration index it plays in) is
    iteration `unlock_at + 1`."""
    if not every:
        return []
    return [k + 1 for k in range(iterations) if (k + 1) % every == 0 or k + 1 == iterations]


def _stage_lines(cfg, evaluated: list[int]) -> list[str]:
    n, e = cfg.run.iterations, cfg.evaluation
    init = [s for s in layout.INIT_STAGES if s != layout.EVALUATE or (e.every and e.at_start)]
    final = [s for s in layout.FINAL_STAGES if s != layout.STRENGTH or (e.every and e.at_start)]
    it = [s if s != layout.EVALUATE else f"{s} ({_after(evaluated)})"
          for s in layout.ITERATION_STAGES if s != layout.EVALUATE or evaluated]
    return ["stages, in the order the run writes them:",
            f"  {layout.INIT}/: " + " -> ".join(init),
            f"  {_iterations(n)}: " + " -> ".join(it),
            f"  {layout.FINAL}/: " + " -> ".join(final)]


def _iterations(n: int) -> str:
    """The iterations counted as everywhere in the plan, from 1, with their folders (iteration
    k is `iter_{k-1}`): "iterations 1-4 (iter_0000 .. iter_0003)"."""
    if n == 1:
        return f"iteration 1 ({layout.iter_name(0)})"
    return f"iterations 1-{n} ({layout.iter_name(0)} .. {layout.iter_name(n - 1)})"


def _after(ks: list[int]) -> str:
    return f"after iteration{'s' * (len(ks) != 1)} {_ranges(ks)}"


def _ranges(ks: list[int]) -> str:
    return ", ".join(map(str, ks)) if len(ks) <= 6 else f"{ks[0]}, {ks[1]}, ..., {ks[-1]}"


def _opponents(cfg) -> list[str]:
    """Who sits across the policy in training, per game (a curriculum: each stage with the
    iteration it unlocks at and its weight)."""
    lines = []
    for game in cfg.rollout.games:
        spec = cfg.rollout.opponents.get(game, SELF)
        if isinstance(spec, str):
            lines.append(f"  {game}: {spec}")
        else:
            lines.append(f"  {game}: " + ", ".join(
                f"{s.opponent} from iteration {s.unlock_at + 1} (weight {s.weight:g})"
                for s in spec))
    return lines


def _per_game(cfg) -> str:
    from mars_core.rollout.samplers import game_schedule

    r = cfg.rollout
    counts = Counter(game_schedule(r.games, r.episodes_per_iteration, dict(r.game_weights),
                                   random.Random(0)))
    about = "about " if r.game_weights else ""
    return ", ".join(f"{g} {about}{counts[g]}" for g in r.games)


def engine_game_lines(games) -> list[str]:
    """What the run does with a game named through its engine (`openspiel:<name>`,
    `textarena:<EnvId>`): the generic adapter, the seats, what the bots can do."""
    from mars_core.games.catalog import is_generic, record
    from mars_core.games.listing import fitting_bots
    from mars_core.games.registry import make_game

    lines = []
    for game in dict.fromkeys(games):
        if not is_generic(game):
            continue
        rec, adapter = record(game), make_game(game)
        limit = f", scored as it stands after {adapter.move_limit} moves" \
            if adapter.move_limit else ""
        lines.append(f"  {game}: the generic {rec.family} adapter (the engine's own rules, "
                     f"state and actions), {adapter.num_players} seats, bots that fit: "
                     f"{fitting_bots(game)}{limit}")
    return lines


def reproducible_line(backend: str, bf16_setting: str, invariant_setting: str) -> str:
    """`reproducible: ...` for an engine and the precision and batch-invariance settings."""
    from mars_core.models.invariant import statement, wanted
    from mars_core.models.precision import bf16_for

    bf16 = bf16_for(bf16_setting, "play")
    return f"reproducible: {statement(backend, bf16, wanted(invariant_setting, bf16))}"


# algorithm.train_actions in words: what the update trains on (mars_core/config/train.py)
UPDATES = {
    "sampled": "update: the sampled answers by their advantages (policy gradient)",
    "all": "update: every answer seen in a state, by its mean advantage there",
    "greedy": "update: the best measured answer as a label (train_actions: greedy)",
    "best_valued": "update: the best answer by Monte-Carlo values as a label",
    "sampled_and_best": "update: the sampled answers and the best valued one",
    "mirror": "update: Magnetic Mirror Descent (train_actions: mirror; each visited state's "
              "answers fitted to the closed-form target)",
}


def training_plan(cfg) -> list[str]:
    n, r, e, w = cfg.run.iterations, cfg.rollout, cfg.evaluation, cfg.warmup
    evaluated = evaluated_after(n, e.every)
    suite = e.suite(r.games)
    per_eval = suite_games(suite, e.games_per_seat)
    evaluations = len(evaluated) + bool(e.every and e.at_start)
    probes = w.probe_games * (2 if w.steps else 1)
    lines = [f"games: {', '.join(r.games)}", *engine_game_lines((*r.games, *e.held_out)),
             "training opponents (the policy holds one seat against an opponent, every "
             "seat in self-play):", *_opponents(cfg),
             f"evaluation opponents ({e.games_per_seat} games per game x opponent x seat):",
             *(f"  {g}: {', '.join(o)}{' (held out: never trained on)' if g in e.held_out else ''}"
               for g, o in suite.items()),
             f"algorithm: estimator {cfg.algorithm.estimator}, "
             f"{UPDATES[cfg.algorithm.train_actions]}, batching.unit {cfg.batching.unit}; "
             f"engine: {cfg.engine.backend}",
             *_stage_lines(cfg, evaluated),
             f"per iteration: {r.episodes_per_iteration} training games ({_per_game(cfg)})"]
    if evaluations:
        start = ["the start policy"] if e.every and e.at_start else []
        after = [_after(evaluated)] if evaluated else []
        lines.append(f"evaluations: {evaluations} ({', '.join(start + after)}), {per_eval} "
                     "games each")
    else:
        lines.append("evaluations: none (evaluation.every is 0)")
    warm = (f"{w.steps} warm-up steps, {probes} probe games" if w.steps else
            f"{probes} probe games" if probes else "no warm-up")
    lines.append(f"in all: {n * r.episodes_per_iteration} training games, "
                 f"{evaluations * per_eval} evaluation games; {warm}")
    lines.append(reproducible_line(cfg.engine.backend, cfg.model.bf16, cfg.model.batch_invariant))
    lines.append("nothing written: no run folder, no MLflow run, no Prefect flow run")
    return lines


def game_eval_plan(cfg) -> list[str]:
    total = suite_games(cfg.suite, cfg.n)
    return [f"games and opponents ({cfg.n} games per game x opponent x seat; seed {cfg.seed}):",
            *(f"  {g}: {', '.join(o)}" for g, o in cfg.suite.items()),
            f"in all: {total} games per policy evaluated",
            reproducible_line("hf", cfg.bf16, cfg.batch_invariant),
            "nothing written: no results file, no MLflow run, no Prefect flow run"]


def arena_plan(cfg, pool: bool) -> list[str]:
    from mars_core.arena.schedule import pool_matches, round_robin, sampled

    labels = list(cfg.labelled())
    if pool:
        matches = pool_matches(labels, list(cfg.games), cfg.n, cfg.seed)
        how = f"pool schedule, {cfg.n} games per combination and rotation"
        count = f"{len(matches)} games per newcomer scored"
    elif labels:
        matches = (round_robin(labels, list(cfg.games), cfg.n, cfg.seed)
                   if cfg.schedule == "round_robin" else
                   sampled(labels, list(cfg.games), cfg.matches, cfg.seed))
        how = (f"{cfg.schedule}, " + (f"{cfg.n} games per combination and rotation"
                                      if cfg.schedule == "round_robin" else
                                      f"{cfg.matches} draws per game"))
        count = f"{len(matches)} games"
    else:
        how, count = cfg.schedule, "the agents come from the command line (--agents, --run)"
    by_game = Counter(m.game for m in matches) if labels else Counter()
    return [f"games: {', '.join(cfg.games)} ({how})",
            *(f"  {g}: {by_game[g]} games" for g in cfg.games if labels),
            f"in all: {count}",
            "nothing written: no arena files, no MLflow run, no Prefect flow run"]
