"""What a run is judged by (§5.1 "Policies and metrics"), computed from its records.

Dynamic traces are judged on a window of jobs in steady state (the paper's 1000 jobs
4000:5000); static traces on all jobs, by makespan. Utilisation is time-averaged over the
same window, from the first measured arrival to the last measured completion, in two
senses:
  * allocated (`gpu_util`, `cpu_util`, `mem_util`): the fraction of the cluster's GPUs,
    CPUs and memory that running jobs hold;
  * used (`cpu_used`, `mem_used`): the fraction they can consume, each job's allocation
    capped at its saturating demand. This is what Fig. 10b plots: GPU-proportional
    allocation hands out every CPU on a full cluster, but a language model leaves most of
    its share idle.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from synergy.scheduler.simulator.engine import USAGE_CAPACITY, SimResult
from synergy.scheduler.simulator.errors import SimInputError

HOUR = 3600.0


def measured_jcts_s(result: SimResult, measured: Iterable[int]) -> list[float]:
    """JCTs of the measured jobs that completed, in job-id order."""
    out = []
    for jid in sorted(measured):
        rec = result.records.get(jid)
        if rec is not None and rec.completion_s is not None:
            out.append(rec.completion_s - rec.arrival_s)
    return out


def summarise(result: SimResult, measured: frozenset[int]) -> dict[str, Any]:
    recs = [result.records[j] for j in sorted(measured) if j in result.records]
    done = [r for r in recs if r.completion_s is not None]
    jct = np.array([r.completion_s - r.arrival_s for r in done], dtype=float)
    started = [r.first_start_s - r.arrival_s for r in recs if r.first_start_s is not None]
    start = min((r.arrival_s for r in recs), default=0.0)
    end = max((r.completion_s for r in done), default=start)
    if len(done) < len(recs):
        end = max(end, result.end_s)
    util = average_utilisation(result, start, end)

    def stat(fn) -> float | None:
        return float(fn(jct)) / HOUR if jct.size else None

    return {
        "avg_jct_h": stat(np.mean),
        "median_jct_h": stat(np.median),
        "p95_jct_h": stat(lambda a: np.percentile(a, 95)),
        "p99_jct_h": stat(lambda a: np.percentile(a, 99)),
        "makespan_h": (end - start) / HOUR if done else None,
        "avg_queue_delay_h": float(np.mean(started)) / HOUR if started else None,
        "p95_queue_delay_h": float(np.percentile(started, 95)) / HOUR if started else None,
        "gpu_util": util[0],
        "cpu_util": util[1],
        "mem_util": util[2],
        "cpu_used": util[3],
        "mem_used": util[4],
        "jobs_measured": len(done),
        "jobs_unfinished": len(recs) - len(done),
        "rounds": result.rounds,
        # Tesserae's migrations: over the whole run, per round passed with jobs, and per
        # measured job (its moves while it ran).
        "migrations": result.migrations,
        "migrations_per_round": result.migrations / result.rounds if result.rounds else 0.0,
        "migrations_per_job": float(np.mean([r.migrations for r in recs])) if recs else None,
        # Tesserae's packing: jobs sharing another's GPUs, per round passed with jobs, and
        # how many jobs ever did (over the whole run).
        "packed_per_round": result.packed_job_rounds / result.rounds if result.rounds else 0.0,
        "packed_jobs": result.packed_jobs,
        "decisions": result.decisions,
        "stopped": result.stopped,
        "sim_end_h": result.end_s / HOUR,
        **_loaning(result),
        **_per_type(result, start, end),
    }


def _per_type(result: SimResult, start: float, end: float) -> dict[str, Any]:
    """Typed clusters: each GPU type's time-averaged allocated fraction over the measured span
    (`gpu_util_by_type`: type -> fraction; "" = untyped servers). Nothing on untyped ones."""
    if not result.gpu_types:
        return {}
    util = _time_average(result.type_timeline, list(result.type_gpus), start, end)
    return {"gpu_util_by_type": dict(zip(result.gpu_types, util))}


def _loaning(result: SimResult) -> dict[str, Any]:
    """Lyra's loaning counts over the whole run (none without an inference pool)."""
    stats = result.loaning
    if stats is None:
        return {}
    return {
        "loans": stats.loans,
        "reclaims": stats.reclaims,
        "preemptions": stats.preemptions,
        "shrinks": stats.shrinks,
        "loaned_gpu_util": stats.loaned_busy_gpu_s / stats.loaned_gpu_s if stats.loaned_gpu_s else None,
    }


def _capacities(result: SimResult) -> list[float]:
    """The capacity each timeline column is a fraction of, in USAGE_COLUMNS order."""
    return [result.capacity[i] for i in USAGE_CAPACITY]


def average_utilisation(result: SimResult, start: float, end: float) -> tuple[float, ...]:
    """Time-averaged fractions on [start, end] of the step function `result.timeline`:
    (gpu, cpu, mem allocated, cpu used, mem used), the USAGE_COLUMNS order."""
    return _time_average(result.timeline, _capacities(result), start, end)


def _time_average(rows: list[tuple[float, ...]], cap: list[float], start: float, end: float) -> tuple[float, ...]:
    """Time-averaged fractions of `cap` on [start, end] of a step function (time, *values)."""
    n = len(cap)
    if end <= start:
        return (0.0,) * n
    acc = [0.0] * n
    for i, (t, *vals) in enumerate(rows):
        t_next = rows[i + 1][0] if i + 1 < len(rows) else max(end, t)
        lo, hi = max(t, start), min(t_next, end)
        if hi > lo:
            for d in range(n):
                acc[d] += vals[d] * (hi - lo)
    span = end - start
    return tuple(acc[d] / span / cap[d] if cap[d] else 0.0 for d in range(n))


#: `--utilisation-csv` columns after the time: allocated fractions, then used fractions.
UTILISATION_CSV_COLUMNS = ("gpu_frac", "cpu_frac", "mem_frac", "cpu_used_frac", "mem_used_frac")


def write_utilisation_csv(path: str | Path, result: SimResult) -> None:
    """Allocated GPU/CPU/memory and used CPU/memory fractions over time; each row holds until
    the next one."""
    cap = _capacities(result)
    try:
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(("time_s", "time_h", *UTILISATION_CSV_COLUMNS))
            for t, *vals in result.timeline:
                w.writerow((f"{t:.3f}", f"{t / HOUR:.6f}",
                            *(f"{max(0.0, v) / k:.6f}" if k else "0" for v, k in zip(vals, cap))))
    except OSError as exc:
        raise SimInputError(f"--utilisation-csv {path}: cannot write ({exc.strerror})") from None
