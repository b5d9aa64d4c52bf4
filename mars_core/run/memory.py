"""Peak resident memory of a stage: what a user sizes a machine (or a GPU batch) by.

`PeakRSS` measures this process while a block runs: the kernel's high-water mark
(`getrusage`'s `ru_maxrss`, exact) when the block set a new record for the process, else the
highest resident size a sampling thread saw (every `interval` seconds, from
/proc/self/statm; a peak shorter than the interval may be missed). Processes the stage
starts (a vLLM server, DeepSpeed workers, Ray workers) are not counted: their own peaks are
theirs. Linux only for the sampled part; elsewhere the high-water mark alone.
"""
from __future__ import annotations

import ctypes
import functools
import os
import resource
import threading
from pathlib import Path

from mars_core.run.commit import read_json
from mars_core.run.layout import METRICS_FILE

GIB = 1024 ** 3
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident size now (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


def high_water_bytes() -> int:
    """The most this process has held resident since it started (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakRSS:
    """`with PeakRSS() as peak: ...` then `peak.gib`: the block's peak resident size."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval, self.peak = interval, 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self) -> "PeakRSS":
        self._before = high_water_bytes()
        self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())
        after = high_water_bytes()
        if after > self._before:  # a new record for the process: the kernel's exact peak
            self.peak = max(self.peak, after)

    @property
    def gib(self) -> float:
        return self.peak / GIB


def release_memory() -> None:
    """Hand freed memory back to the system: Python's cycles collected, then glibc's free
    lists trimmed (`trim_malloc`). Measured on the demo: 0.84 GiB back after the warm-up
    (docs/performance.md)."""
    import gc

    gc.collect()
    trim_malloc()


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def trim_malloc() -> None:
    """glibc's free lists handed back to the system (`malloc_trim(0)`): torch's CPU tensors
    come from malloc, and glibc keeps what was freed, so the next stage's peak, or the next
    forward pass's, would stand on the last one's. An update calls it after each backward
    pass and optimizer step (Blotto's update replayed: 4.54 -> 4.09 GiB at the same time,
    docs/performance.md). A no-op without glibc."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def memory_peaks(run: Path) -> dict[str, float]:
    """Stage -> its highest peak over a run's stages, in GiB (`memory/<stage>_peak_rss_gib`
    of every stage's metrics); {} for a run from before they were measured."""
    peaks: dict[str, float] = {}
    for metrics in sorted(Path(run).glob(f"*/*/{METRICS_FILE}")):
        for key, v in read_json(metrics).items():
            if key.startswith("memory/") and key.endswith("_peak_rss_gib"):
                stage = key.removeprefix("memory/").removesuffix("_peak_rss_gib")
                peaks[stage] = max(peaks.get(stage, 0.0), v)
    return peaks


def memory_markdown(peaks: dict[str, float]) -> str:
    """The peaks as a Markdown section, the largest first ("" when there are none)."""
    rows = [f"| {s} | {v:.2f} |" for s, v in sorted(peaks.items(), key=lambda x: -x[1])]
    return ("\n## Peak resident memory per stage (GiB, the training process)\n\n"
            "| stage | peak |\n|---|---:|\n" + "\n".join(rows) + "\n") if rows else ""
