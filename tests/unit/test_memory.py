"""A stage's peak resident memory (issue 63): measured around the stage's body, written with
its metrics, and read back per stage for the learning report."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mars_core.run.commit import write_json
from mars_core.run.memory import memory_markdown, memory_peaks, release_memory, rss_bytes


def test_a_block_that_holds_memory_shows_its_peak():
    """In a fresh process: a shared test worker may have peaked higher before and hold freed
    memory resident, so the block would neither rise its resident size nor set a record. The
    block is held for ten samples: the fresh process's imports may have set a record above it
    (fresh-clone run of cb901e4: the peak read as the resident size before the block)."""
    import subprocess
    import sys

    code = ("import time\n"
            "from mars_core.run.memory import GIB, PeakRSS, rss_bytes\n"
            "before = rss_bytes()\n"
            "with PeakRSS() as peak:\n"
            "    block = bytearray(300 * 1024 ** 2)  # 300 MiB, touched so it is resident\n"
            "    for i in range(0, len(block), 4096):\n"
            "        block[i] = 1\n"
            "    time.sleep(0.5)  # ten samples: the imports may have set a higher record\n"
            "    del block\n"
            "assert peak.peak >= before + 250 * 1024 ** 2, (before, peak.peak)\n"
            "assert peak.gib == peak.peak / GIB\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_peaks_per_stage_are_read_from_the_stages_metrics(tmp_path):
    from mars_core.run.layout import GENERATE_ROLLOUTS, METRICS_FILE, TRAIN_STEP, stage_dir

    for k, stage, value in ((0, GENERATE_ROLLOUTS, 1.5), (1, GENERATE_ROLLOUTS, 2.5),
                            (1, TRAIN_STEP, 3.0)):
        stage_dir(tmp_path, k, stage).mkdir(parents=True)
        write_json(stage_dir(tmp_path, k, stage) / METRICS_FILE,
                   {f"memory/{stage}_peak_rss_gib": value, f"time/{stage}": 1.0})
    assert memory_peaks(tmp_path) == {GENERATE_ROLLOUTS: 2.5, TRAIN_STEP: 3.0}
    text = memory_markdown(memory_peaks(tmp_path))
    assert text.index(TRAIN_STEP) < text.index(GENERATE_ROLLOUTS)  # the largest first
    assert memory_markdown({}) == ""


def test_every_stage_records_its_peak(tmp_path):
    from mars_core.run.layout import GENERATE_ROLLOUTS, stage_dir
    from tasks.stage_runner import run_stage

    metrics = run_stage(tmp_path, 0, GENERATE_ROLLOUTS, lambda out: {"x": 1.0}, step=None)
    assert metrics[f"memory/{GENERATE_ROLLOUTS}_peak_rss_gib"] > 0.01
    assert stage_dir(tmp_path, 0, GENERATE_ROLLOUTS).is_dir()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_memory_goes_back_to_the_system():
    """What a stage freed but the allocator kept (holes between live blocks: glibc does not
    trim them by itself) is handed back, so the next stage's peak does not stand on it."""
    blocks = [bytearray(64 * 1024) for _ in range(4000)]  # 256 MiB of malloc'd blocks
    del blocks[::2]  # 128 MiB of holes between the blocks still held
    held = rss_bytes()
    release_memory()
    assert held - rss_bytes() > 64 * 2 ** 20
    del blocks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
@pytest.mark.parametrize("call", ["backward", "step"])
def test_each_backward_pass_and_optimizer_step_of_an_update_hands_back_what_was_freed(call):
    """Inside an update, memory freed by one pass (its activations, the optimizer's
    temporaries) goes back before the next pass allocates: Blotto's replayed update peaked
    0.45 GiB lower for it (docs/performance.md)."""
    import torch

    from mars_core.training.trainer import TorchUpdater, make_optimizer
    from mars_core.config import OptimConfig

    model = torch.nn.Linear(4, 1)
    opt, sched = make_optimizer(model, OptimConfig(), 10)
    updater = TorchUpdater(model, opt, sched, grad_clip=1.0)
    loss = model(torch.ones(2, 4)).sum()
    if call == "step":
        loss.backward()
    blocks = [bytearray(64 * 1024) for _ in range(4000)]
    del blocks[::2]  # 128 MiB freed between blocks still held, as a pass leaves them
    held = rss_bytes()
    updater.backward(loss) if call == "backward" else updater.step()
    assert held - rss_bytes() > 64 * 2 ** 20
    del blocks
