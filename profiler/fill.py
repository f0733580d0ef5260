"""Complete a measured CPU curve into a whole sensitivity profile with the MinIO model (§3.1).

The paper, §3.1: "For a given CPU allocation that determines the pre-processing speed, and a
known storage bandwidth, it is easy to analytically model the job throughput for varying
memory allocation. Therefore, we only need to empirically profile the job for varying CPU
values at full memory allocation."

The model is the project's one MinIO model (`synergy.scheduler.profiles.minio`): at CPUs c and
memory m a job runs at the slower of what its CPUs (and GPU) deliver and what storage delivers
for the misses::

    rate(c, m) = min(measured(c), storage(m))
    storage(m) = B / ((1 - hit(m)) * sample size),   hit(m) = min(1, (m - process) / dataset)

`measured(c)` is the curve at full memory: it already holds the GPU's limit and the per-sample
CPU cost, so the fill never needs to separate the two. Every job-level quantity (CPUs, samples/s,
memory, process memory, storage bandwidth) is divided by the job's GPUs to give the per-GPU
profile of docs/profiles.md. The dataset is divided too: a job's GPUs share one MinIO cache, so
per GPU it caches (m - process) of a 1/gpus share of the dataset: exact for this job (the zoo,
which has no job, is conservative instead; see docs/profiles.md).

Grid: one row per measured CPU count (the scheduler interpolates between them). Columns: the
process memory (no cache), then cache sizes whose miss fractions shrink geometrically by
`MISS_STEP` (the storage rate is hyperbolic in the miss fraction; with this step a straight line
between two columns is within about 0.5% of it), plus, for every row, the exact memory where
storage stops being the bottleneck (so each row's corner is a grid point), the memory that
caches the whole dataset, and the full memory. Reference: the fastest measured row at full
memory (speed 1.0 is a measured throughput, not a modelled one).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from synergy.scheduler.profiles.format import TASKS, SensitivityProfile
from synergy.scheduler.profiles.minio import (
    DIGITS,
    hit_fraction,
    miss_for_storage_rate,
    storage_samples_per_s,
)

#: Ratio between the miss fractions of neighbouring memory columns.
MISS_STEP = 1.15
#: Memory columns are rounded to this many decimals of a GB (1 kB): small datasets stay distinct.
MEM_DIGITS = 6
#: Significant digits kept of iter_time_s (a fast job's seconds per iteration are tiny).
ITER_TIME_SIG_DIGITS = 6


def complete_profile(
    points: Sequence[tuple[int, float]],
    *,
    gpus: int,
    dataset_bytes: int,
    sample_bytes: float,
    storage_bytes_per_s: float,
    process_mem_gb: float,
    max_mem_gb: float,
    model: str,
    task: str,
    batch_size: int = 1,
) -> dict[str, Any]:
    """One model entry of the docs/profiles.md format from CPU points measured at full memory.

    `points`: (CPUs, samples/s) of the whole job, each measured with `max_mem_gb` of memory.
    `gpus`: the job's GPUs. `dataset_bytes`, `sample_bytes`: the stored training set and its
    mean sample. `storage_bytes_per_s`: the job's measured read bandwidth (`storage.py`).
    `process_mem_gb`: the job's memory that is not cache (all its processes). `max_mem_gb`: the
    job's full memory, at which the points were measured. `batch_size`: samples per iteration
    per GPU (`iter_time_s` is per iteration; with 1 an iteration is one sample).
    Raises ValueError naming the argument when an input is unusable.
    """
    _check_inputs(points, gpus, dataset_bytes, sample_bytes, storage_bytes_per_s,
                  process_mem_gb, max_mem_gb, model, task, batch_size)
    rows = sorted((c / gpus, t / gpus) for c, t in points)
    if len(rows) == 1:
        # The format wants two rows; below its first row it reads speed as falling linearly
        # to zero, so a row at half the CPUs with half the speed says exactly the same.
        rows.insert(0, (rows[0][0] / 2, rows[0][1] / 2))
    process_gb, full_gb = process_mem_gb / gpus, max_mem_gb / gpus
    dataset_gb = dataset_bytes / gpus / 1e9
    sample_kb, storage_mb_s = sample_bytes / 1e3, storage_bytes_per_s / gpus / 1e6

    def rate(samples_per_s: float, mem_gb: float) -> float:
        miss = 1.0 - hit_fraction(mem_gb, process_gb, dataset_gb)
        return min(samples_per_s, storage_samples_per_s(miss, sample_kb, storage_mb_s))

    columns = _memory_columns([t for _, t in rows], process_gb, full_gb, dataset_gb,
                              sample_kb, storage_mb_s)
    ref_row = max(range(len(rows)), key=lambda i: (rate(rows[i][1], full_gb), -i))
    ref_rate = rate(rows[ref_row][1], full_gb)
    if not ref_rate > 0:
        raise ValueError("points: every measured throughput is zero")
    entry = {
        "task": task,
        "cpus_per_gpu": [c for c, _ in rows],
        "mem_gb_per_gpu": columns,
        "throughput": [[round(rate(t, m) / ref_rate, DIGITS) for m in columns] for _, t in rows],
        "reference": {"cpus_per_gpu": rows[ref_row][0], "mem_gb_per_gpu": columns[-1]},
        "iter_time_s": float(f"{batch_size / ref_rate:.{ITER_TIME_SIG_DIGITS}g}"),
        "source": (
            f"profiled: {len(points)} points at {', '.join(str(c) for c, _ in sorted(points))} "
            f"CPUs for {gpus} GPU(s), {max_mem_gb:g} GB; memory axis from the MinIO model "
            f"(dataset {dataset_bytes / 1e9:.4g} GB, {sample_bytes / 1e3:.4g} kB/sample, "
            f"storage {storage_bytes_per_s / 1e6:.4g} MB/s, process {process_mem_gb:g} GB)"
        ),
    }
    SensitivityProfile.from_dict(model, entry)  # the scheduler's own parser must accept it
    return entry


def _memory_columns(
    rates: list[float],
    process_gb: float,
    full_gb: float,
    dataset_gb: float,
    sample_kb: float,
    storage_mb_s: float,
) -> list[float]:
    """Per-GPU memory columns, strictly increasing, from the process memory to full memory."""

    def mem_for_miss(miss: float) -> float:
        return process_gb + (1.0 - miss) * dataset_gb

    fastest = max(rates)
    floor = miss_for_storage_rate(fastest, sample_kb, storage_mb_s) if fastest > 0 else 1.0
    misses = {0.0}  # the whole dataset cached
    miss = 1.0
    while miss > floor:
        misses.add(miss)
        miss /= MISS_STEP
    for r in rates:  # each row's corner: storage exactly keeps up with that row
        if r > 0:
            misses.add(miss_for_storage_rate(r, sample_kb, storage_mb_s))
    low, high = round(process_gb, MEM_DIGITS), round(full_gb, MEM_DIGITS)
    mems = {round(mem_for_miss(m), MEM_DIGITS) for m in misses if 0.0 <= m <= 1.0}
    # Compared once rounded: a column within 1 kB above the process memory rounds onto it.
    return [low, *sorted(m for m in mems if low < m < high), high]


def _check_inputs(points, gpus, dataset_bytes, sample_bytes, storage_bytes_per_s,
                  process_mem_gb, max_mem_gb, model, task, batch_size) -> None:
    def positive(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0
        ):
            raise ValueError(f"{name} must be a positive number, got {value!r}")

    for name, value in (("gpus", gpus), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    for name, value in (("dataset_bytes", dataset_bytes), ("sample_bytes", sample_bytes),
                        ("storage_bytes_per_s", storage_bytes_per_s),
                        ("process_mem_gb", process_mem_gb), ("max_mem_gb", max_mem_gb)):
        positive(name, value)
    if round(max_mem_gb / gpus, MEM_DIGITS) <= round(process_mem_gb / gpus, MEM_DIGITS):
        raise ValueError(f"max_mem_gb ({max_mem_gb}) must exceed process_mem_gb ({process_mem_gb})")
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must be a non-empty string, got {model!r}")
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if not points:
        raise ValueError("points: no CPU count was measured")
    seen: set[int] = set()
    for i, point in enumerate(points):
        try:
            cpus, samples_per_s = point
        except (TypeError, ValueError):
            raise ValueError(f"points[{i}] must be a (cpus, samples_per_s) pair, got {point!r}") from None
        positive(f"points[{i}] cpus", cpus)
        if isinstance(samples_per_s, bool) or not isinstance(samples_per_s, (int, float)) or not (
            math.isfinite(samples_per_s) and samples_per_s >= 0
        ):
            raise ValueError(f"points[{i}] samples_per_s must be a finite number >= 0, got {samples_per_s!r}")
        if cpus in seen:
            raise ValueError(f"points[{i}]: cpus {cpus} measured twice")
        seen.add(cpus)
