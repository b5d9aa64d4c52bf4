"""`mars check CONFIG`: a preset validated with its overlays and overrides, its models checked,
its plan printed, and nothing written; bad input is one line, exit 2. Every preset under
configs/ passes it (the presets the docs show are the ones that load)."""
from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main
from mars_core.run import layout
from tests.conftest import REPO

CONFIGS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "configs").rglob("*.yaml"))


@pytest.fixture
def empty_cwd(tmp_path, monkeypatch):
    """An empty working folder and an empty model cache: `mars check` must leave both empty."""
    cwd, cache = tmp_path / "cwd", tmp_path / "cache"
    cwd.mkdir()
    cache.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("MARS_CACHE_DIR", str(cache))
    yield cwd
    assert not any(cwd.iterdir()) and not any(cache.iterdir()), "mars check wrote something"


def _check(capsys, *args):
    rc = main(["check", *args])
    out, err = capsys.readouterr()
    return rc, out, err.strip()


def test_a_valid_preset_prints_its_plan_and_writes_nothing(empty_cwd, capsys):
    rc, out, err = _check(capsys, str(REPO / "configs/demo.yaml"))
    assert rc == 0 and not err, err
    assert "a valid training preset" in out and "model: embedded" in out
    assert f"run folder: {Path('runs') / 'demo'} (new" in out
    # the stages of one iteration, in the layout's order
    iteration = next(line for line in out.splitlines() if "iteration" in line and "->" in line)
    assert iteration.startswith("  iterations 1-4 (iter_0000 .. iter_0003): ")
    assert iteration.split(": ", 1)[1].split(" -> ")[:-1] == list(layout.ITERATION_STAGES[:-1])
    assert iteration.split(" -> ")[-1].startswith(f"{layout.EVALUATE} (after iterations 1, 2, ")
    assert "games: kuhn_poker" in out and "  kuhn_poker: bot:random" in out
    # 4 iterations x 64 self-play games; the start policy and after each iteration: 30 x 2 seats
    assert "  kuhn_poker: self" in out and "per iteration: 64 training games (kuhn_poker 64)" in out
    # the update by name: the demo's is Magnetic Mirror Descent, not the estimator's gradient
    assert ("algorithm: estimator mars, update: Magnetic Mirror Descent (train_actions: mirror"
            in out)
    assert "evaluations: 5 (the start policy, after iterations 1, 2, 3, 4), 60 games each" in out
    assert ("in all: 256 training games, 300 evaluation games; 12 warm-up steps, 16 probe games"
            in out)


def test_overlays_and_overrides_are_resolved_into_the_plan(empty_cwd, capsys):
    rc, out, err = _check(capsys, "--config", str(REPO / "configs/mindgames/in2ai.yaml"),
                          "--overlay", str(REPO / "configs/scales/smoke.yaml"),
                          "--set", "run.iterations=3", "--set", "evaluation.every=1")
    assert rc == 0 and not err, err
    # iterations counted from 1 throughout, with their folders (iteration k: iter_{k-1})
    assert "  iterations 1-3 (iter_0000 .. iter_0002): " in out
    assert "after iterations 1, 2, 3" in out
    # the In2AI opponent curriculum, stage by stage: unlock_at 0 is the first iteration
    assert "bot:random from iteration 1 (weight 1), bot:blotto-focus from iteration 2" in out


@pytest.mark.parametrize("preset,expected", [
    ("configs/eval/mars_strategic_quick.yaml", "a valid game-evaluation preset"),
    ("configs/arena/demo.yaml", "an arena preset"),
])
def test_evaluation_and_arena_presets_are_planned_too(empty_cwd, capsys, preset, expected):
    rc, out, err = _check(capsys, str(REPO / preset))
    assert rc == 0 and expected in out and "in all: " in out, err


@pytest.mark.parametrize("preset", CONFIGS)
def test_every_shipped_preset_passes_mars_check(empty_cwd, capsys, preset):
    rc, out, err = _check(capsys, str(REPO / preset))
    assert rc == 0, err


def _combinations() -> list[tuple[str, str]]:
    """The presets `mars compare` lays overlays over: every variant over every learning base
    (`--seeds`), the smoke scale over every ablation preset (the README's quick comparison)."""
    from flows.compare import ABLATE_BASES, ABLATIONS, LEARNING_BASES, VARIANTS

    return ([(b, v) for b in ABLATE_BASES + LEARNING_BASES for v in VARIANTS]
            + [(a, "configs/scales/smoke.yaml") for a in ABLATIONS])


@pytest.mark.parametrize("preset,overlay", _combinations())
def test_the_overlays_compare_lays_over_presets_pass_mars_check(empty_cwd, capsys, preset,
                                                                 overlay):
    rc, _, err = _check(capsys, str(REPO / preset), "--overlay", str(REPO / overlay))
    assert rc == 0, err


def _bad_yaml(tmp_path, text):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    return str(p)


BAD = [  # (args, text of the one line)
    (["configs/demo.yaml", "--set", "rollout.temprature=0.9"],
     "unknown config key 'rollout.temprature'"),
    (["configs/demo.yaml", "--set", "rollout.games=[chess]"], "unknown game 'chess'"),
    (["configs/demo.yaml", "--set", "evaluation.opponents={kuhn_poker: bot:mcts-5}"],
     "does not fit kuhn_poker"),
    (["configs/demo.yaml", "--set", "model.path=/no/such/model"], "model path does not exist"),
    (["configs/demo.yaml", "--overlay", "configs/nope.yaml"], "config file not found"),
    (["configs/demo.yaml", "--run-name", "../x"], "--run-name '../x'"),
    (["configs/eval/mars_strategic_quick.yaml", "--set", "suite={kuhn_poker: [bot:mcts-5]}"],
     "does not fit kuhn_poker"),
    (["configs/eval/mars_strategic_quick.yaml", "--overlay", "configs/scales/smoke.yaml"],
     "overlays are for training presets"),
    (["configs/arena/demo.yaml", "--set", "agents=[bot:random, models:/x@]"],
     "bad model URI 'models:/x@'"),
    (["configs/arena/demo.yaml", "--set", "agents=[bot:random, 'http://u:s3cret@h:1']"],
     "an endpoint URL (http://u:"),
    (["configs/demo.yaml", "--config", "configs/smoke.yaml"], "two presets given"),
    ([], "no preset to check"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[b[1][:30] for b in BAD])
def test_bad_input_is_one_line_and_writes_nothing(empty_cwd, capsys, args, needle):
    args = [str(REPO / a) if a.startswith("configs/") else a for a in args]
    rc, out, err = _check(capsys, *args)
    assert rc == 2 and err.startswith("mars: error: ") and needle in err, err
    assert len(err.splitlines()) == 1 and not out and "s3cret" not in err


def test_bad_files_are_one_line(empty_cwd, tmp_path, capsys):
    for text, needle in [("run: [1\n", "bad.yaml, line 2, column 1: not valid YAML"),
                         ("- a\n", "must hold a mapping"),
                         ("run: {iterations: 0}\n", "run.iterations")]:
        rc, _, err = _check(capsys, _bad_yaml(tmp_path, text))
        assert rc == 2 and needle in err and len(err.splitlines()) == 1, err


def test_a_run_folder_of_another_config_is_refused_and_a_resume_is_named(tmp_path, capsys):
    from mars_core.config import load_config
    from tasks.paths import prepare_run_dir

    smoke = str(REPO / "configs/smoke.yaml")
    prepare_run_dir(tmp_path / "smoke", load_config(smoke))
    before = sorted(p.name for p in (tmp_path / "smoke").iterdir())
    rc, out, _ = _check(capsys, smoke, "--runs-dir", str(tmp_path))
    assert rc == 0 and "exists with this config: `mars train` resumes it" in out
    rc, _, err = _check(capsys, smoke, "--runs-dir", str(tmp_path), "--set", "run.seed=7")
    assert rc == 2 and "different config (differs in: run.seed)" in err
    # how a batch goes through the model leaves the results alone: a resume may change it
    rc, out, err = _check(capsys, smoke, "--runs-dir", str(tmp_path), "--set",
                          "optim.micro_batch_size=1", "--set", "warmup.micro_batch_size=1",
                          "--set", "trainer.gradient_checkpointing=true")
    assert rc == 0 and ("exists with this config but for optim.micro_batch_size, "
                        "trainer.gradient_checkpointing, warmup.micro_batch_size (changes that "
                        "leave the results alone): `mars train` resumes it") in out, err
    assert sorted(p.name for p in (tmp_path / "smoke").iterdir()) == before  # no lock taken


def test_a_run_in_progress_is_said_to_be_in_use(tmp_path, capsys):
    """A run folder whose lock another process holds: `mars check` names the holder and says
    that `mars train` waits for it, and takes nothing itself."""
    import fcntl
    import json
    import os

    from mars_core.config import load_config
    from tasks.paths import prepare_run_dir

    smoke = str(REPO / "configs/smoke.yaml")
    run_dir = tmp_path / "smoke"
    prepare_run_dir(run_dir, load_config(smoke))
    fd = os.open(run_dir / layout.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:  # held as lock_run_dir holds it, through a descriptor of its own (another holder)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(fd, json.dumps({"pid": 4242, "host": "elsewhere",
                                  "since": "2026-01-01 00:00:00"}).encode(), 0)
        rc, out, err = _check(capsys, smoke, "--runs-dir", str(tmp_path))
        assert rc == 0 and not err, err
        assert ("exists with this config: in use by process 4242 on elsewhere (since "
                "2026-01-01 00:00:00): `mars train` refuses it until that run ends, then "
                "resumes it") in out
    finally:
        os.close(fd)
    rc, out, _ = _check(capsys, smoke, "--runs-dir", str(tmp_path))  # released: a plain resume
    assert rc == 0 and "exists with this config: `mars train` resumes it)" in out


def test_a_model_folder_is_read_and_a_corrupt_one_refused(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    demo = str(REPO / "configs/demo.yaml")
    rc, out, err = _check(capsys, demo, "--set", f"model.path={model}", "--runs-dir",
                          str(tmp_path / "runs"))
    assert rc == 0 and f"model: {model} (a model folder, read whole)" in out, err
    (model / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{trunc")
    rc, _, err = _check(capsys, demo, "--set", f"model.path={model}", "--runs-dir",
                        str(tmp_path / "runs"))
    assert rc == 2 and "corrupt checkpoint file" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no runs folder made


def test_a_frozen_pool_is_planned_per_newcomer(tmp_path, capsys):
    pool = tmp_path / "pool.yaml"
    pool.write_text("games: [tic_tac_toe]\nn: 2\nreferences:\n"
                    "  - {agent: bot:random, mu: 20.0, sigma: 1.0}\n"
                    "  - {agent: bot:mcts-10, mu: 30.0, sigma: 1.0}\n")
    rc, out, err = _check(capsys, str(pool))
    assert rc == 0 and "a frozen reference pool" in out, err
    # the newcomer against each reference, in both seatings, 2 games each
    assert "in all: 8 games per newcomer scored" in out
