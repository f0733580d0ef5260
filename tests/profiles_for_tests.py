"""Synthetic but realistic sensitivity profiles for core tests (no dependency on the zoo).

Throughput follows the shape of §3.1: the slower of CPU pre-processing (diminishing returns)
and storage fetch of cache misses, capped by the GPU.
"""
from __future__ import annotations

from synergy.scheduler.profiles.format import SensitivityProfile

CPU_ROWS = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0)
MEM_COLS = (20.0, 40.0, 62.5, 125.0, 250.0, 500.0)


def make_profile(name: str, cpu_need: float, dataset_gb: float, fetch: float,
                 alpha: float = 0.8, task: str = "image") -> SensitivityProfile:
    """cpu_need: CPUs/GPU that saturate the GPU; dataset_gb: bytes to cache;
    fetch: storage-bound speed (fraction of GPU speed) when nothing is cached."""

    def raw(c: float, m: float) -> float:
        cpu = min(1.0, (c / cpu_need) ** alpha)
        miss = max(0.0, 1.0 - max(0.0, m - 10.0) / dataset_gb) if dataset_gb > 0 else 0.0
        storage = 1.0 if miss <= 1e-9 else min(1.0, fetch / miss)
        return min(cpu, storage)

    ref = raw(3.0, 62.5)
    grid = tuple(tuple(round(raw(c, m) / ref, 6) for m in MEM_COLS) for c in CPU_ROWS)
    return SensitivityProfile(name, task, CPU_ROWS, MEM_COLS, grid, (3.0, 62.5), 0.1)


ZOO_LIKE = {
    "cpu_hungry": make_profile("cpu_hungry", 12.0, 0.0, 1.0),
    "mem_hungry": make_profile("mem_hungry", 4.0, 600.0, 0.3),
    "both": make_profile("both", 9.0, 400.0, 0.4),
    "insensitive": make_profile("insensitive", 1.0, 0.0, 1.0, task="language"),
}
