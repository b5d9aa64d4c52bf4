"""`bench/gpu_check.py` (issue 47), the check prepared for a short GPU window, kept from rotting:
its dry run (`--tiny`, on the CPU) reports every step and writes its JSON and Markdown; a
package missing on the GPU machine is one line naming it while the other steps run; the carry
folder (`make gpu-carry`) is checked against the device call's 64 MiB; carried wheels are
unpacked only where this interpreter lacks them."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_check.py"
STEPS = ["tests", "matmul", "ppo_update", "generate", "behaviour_gap", "iteration", "deepspeed"]


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "MARS_GPU_CHECK_HIDE"}
    full.update({"OMP_WAIT_POLICY": "PASSIVE", **(env or {})})
    return subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--device", "cpu", "--out",
                           str(out), "--carry", str(out / "no-carry"), *extra],
                          cwd=REPO, env=full, capture_output=True, text=True, timeout=300)


def test_the_dry_run_reports_every_step_and_writes_json_and_markdown(tmp_path):
    """As on the GPU machine, without polars: a placeholder stands in."""
    proc = _run(tmp_path, env={"MARS_GPU_CHECK_HIDE": "polars"})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "Traceback" not in text
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [s["name"] for s in report["steps"]] == STEPS
    status = {s["name"]: s["status"] for s in report["steps"]}
    assert all(status[s] == "ok" for s in STEPS[:5]), status
    for name in ("iteration", "deepspeed"):  # --tiny / a CPU, or packages missing: one line
        assert status[name] == "skipped"
        assert next(s for s in report["steps"] if s["name"] == name)["reason"]
    for s in report["steps"]:
        assert s["seconds"] >= 0 and f"] {s['name']}: {s['status']}" in proc.stdout
    assert report["packages"]["placeholders"] == ["polars"]
    assert report["tiny"] and report["device"] == "cpu" and report["date"] and report["card"]
    assert "--tiny" in report["command"]
    ppo = next(s for s in report["steps"] if s["name"] == "ppo_update")["results"]
    assert [(r["model"], r["backend"]) for r in ppo["rows"]] == [
        ("Qwen3-0.6B shape", "torch"), ("Qwen3-4B shape", "torch, LoRA rank 16, KL 0.05"),
        ("Qwen3-4B shape", "torch")]
    assert [r["gradient_checkpointing"] for r in ppo["rows"]] == [False, False, True]
    assert all(r["tokens_per_s"] > 0 and r["mfu_measured_peak"] > 0 for r in ppo["rows"])
    gen = next(s for s in report["steps"] if s["name"] == "generate")["results"]
    assert [r["batch"] for r in gen["rows"]] == [1, 4] and all(r["tokens_per_s"] > 0
                                                               for r in gen["rows"])
    gap = next(s for s in report["steps"] if s["name"] == "behaviour_gap")["results"]
    assert {(r["engine"], r["trainer"]) for r in gap["rows"]} == {
        ("bf16 autocast", "fp32"), ("bf16 autocast", "bf16 autocast"), ("fp32", "fp32")}
    fp32 = next(r for r in gap["rows"] if r["engine"] == "fp32")
    assert fp32["max_abs"] < 1e-3  # the same kernels in fp32: the gap is rounding
    md = (tmp_path / "gpu_check.md").read_text()
    assert report["card"] in md and report["date"] in md and report["command"] in md
    for name in STEPS:
        assert f"| {name} |" in md


def test_a_missing_package_is_one_line_naming_it_and_the_other_steps_run(tmp_path):
    """The GPU image has no pydantic (unless carried) and no polars (a placeholder stands in)."""
    proc = _run(tmp_path, env={"MARS_GPU_CHECK_HIDE": "pydantic,polars"})
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "Traceback" not in text
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    status = {s["name"]: (s["status"], s["reason"]) for s in report["steps"]}
    for name in ("tests", "ppo_update", "behaviour_gap"):  # need mars_core.config: pydantic
        assert status[name] == ("skipped", "missing package: pydantic"), status
        lines = [line for line in proc.stdout.splitlines() if f"] {name}:" in line]
        assert len(lines) == 1 and "pydantic" in lines[0]
    assert status["matmul"][0] == "ok" and status["generate"][0] == "ok", status
    assert status["iteration"][0] == "skipped" and "polars" in status["iteration"][1]
    assert status["deepspeed"] == ("skipped", "missing package: pydantic")
    assert report["packages"]["placeholders"] == ["polars"]
    assert report["hidden"] == ["pydantic", "polars"]
    assert "missing package: pydantic" in (tmp_path / "gpu_check.md").read_text()


@pytest.mark.full  # `make test`: the dry run of every step above
def test_a_step_past_the_deadline_is_stopped_and_the_files_are_still_written(tmp_path):
    """A step that hangs (a compile that never ends) is stopped at --deadline; no later step
    starts, and the files say so. The deadline counts from the script's start, imports
    included: 40 s leaves a loaded machine time to import torch before the step begins."""
    proc = _run(tmp_path, "--only", "matmul,generate", "--deadline", "40",
                env={"MARS_GPU_CHECK_STALL": "matmul"})
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    status = {s["name"]: (s["status"], s["reason"]) for s in report["steps"]}
    assert status["matmul"] == ("failed", "StepTimeout: ran past the deadline (--deadline 40 s)")
    assert status["generate"][0] == "skipped" and "out of time" in status["generate"][1]
    assert (tmp_path / "gpu_check.md").exists()


def test_the_carry_size_is_checked_against_the_calls_limit(tmp_path):
    gc = _module()
    assert gc.LIMIT_BYTES == 64 * 2**20
    carry = tmp_path / "carry"
    carry.mkdir()
    (carry / "a.whl").write_bytes(b"x" * 2**20)
    fits = gc.carry_size(carry, limit=3 * 2**20, tree=2**20)
    assert fits["carry_bytes"] == 2**20 and fits["total_bytes"] == 2 * 2**20 and fits["fits"]
    (carry / "b.whl").write_bytes(b"x" * 2 * 2**20)
    assert not gc.carry_size(carry, limit=3 * 2**20, tree=2**20)["fits"]
    # the working tree alone leaves room for the carry
    tree = gc.tree_bytes()
    assert 0 < tree < gc.LIMIT_BYTES // 2
    built = REPO / ".gpu-carry"
    if built.is_dir():  # `make gpu-carry` ran here: what it built fits with this tree
        size = gc.carry_size(built, tree=tree)
        assert size["fits"], size
        assert size["carry_bytes"] < 16 * 2**20


def _wheel(folder: Path, dist: str, version: str, module: str, body: str) -> Path:
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{module}/__init__.py", body)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{info}/top_level.txt", module + "\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def test_carried_wheels_are_unpacked_only_where_missing_or_older(tmp_path):
    wheels = tmp_path / "carry" / "wheels"
    wheels.mkdir(parents=True)
    _wheel(wheels, "mars_fake_carried", "1.0", "mars_fake_carried", "VALUE = 42\n")
    _wheel(wheels, "pytest", "0.0.1", "pytest", "raise SystemExit('the old pytest was used')\n")
    code = (f"import sys; sys.path.insert(0, {str(SCRIPT.parent)!r}); import gpu_check as g; "
            "from pathlib import Path; "
            f"n = g.setup_packages(Path({str(tmp_path / 'carry')!r}), Path({str(tmp_path / 'site')!r})); "
            "import mars_fake_carried, pytest; print(n['carried'], mars_fake_carried.VALUE); "
            "print([u for u in n['unused'] if u.startswith('pytest')])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, second = proc.stdout.strip().splitlines()
    assert first == "['mars_fake_carried-1.0-py3-none-any.whl'] 42"
    assert "installed:" in second  # the newer installed pytest stays


def test_make_gpu_check_runs_the_script_with_the_carry():
    out = subprocess.run(["make", "-n", "gpu-check", "OUT=/tmp/x"], cwd=REPO, capture_output=True,
                         text=True, timeout=60).stdout
    assert "bench/gpu_check.py --carry .gpu-carry" in out and "--out /tmp/x" in out
    tiny = subprocess.run(["make", "-n", "gpu-check", "TINY=1"], cwd=REPO, capture_output=True,
                          text=True, timeout=60).stdout
    assert "--tiny" in tiny and "--out runs/gpu-check" in tiny


def test_the_engine_profile_dry_run_splits_a_decode_step(tmp_path):
    """bench/gpu_gen_profile.py (the engine's decode step split into forward, copy and
    sampling): its tiny run on the CPU writes one row per weights kind and batch, every part
    timed, and the profiler's table."""
    full = {k: v for k, v in os.environ.items() if k != "MARS_GPU_CHECK_HIDE"}
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_gen_profile.py"), "--tiny",
                           "--out", str(tmp_path), "--carry", str(tmp_path / "no-carry")],
                          cwd=REPO, env={**full, "OMP_WAIT_POLICY": "PASSIVE"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "gen_profile.json").read_text())
    assert [(r["weights"], r["batch"]) for r in report["rows"]] == [
        ("fp32 + bf16 autocast", 1), ("fp32 + bf16 autocast", 4), ("bf16 weights", 1),
        ("bf16 weights", 4)]
    parts = ("forward_ms", "to_cpu_ms", "sample_cpu_ms_per_row", "sample_gpu_ms",
             "engine_rowwise_ms_per_step", "engine_ms_per_step", "engine_tokens_per_s")
    assert all(r[k] > 0 for r in report["rows"] for k in parts)
    assert "aten::" in (tmp_path / "gen_profile.txt").read_text()
