"""CPU-only job traces for the simulator (CODA's CPU jobs), generated or read from CSV.

A CPU-only job asks for fixed CPUs and memory and needs `duration_s` seconds of running at
them; the engine advances it at one iteration per second (`engine.py`), so its iterations
are that duration. It is preempted like any job when the CPU array does not give it room
again (borrowed CPUs returned to training) and resumes where it stopped (CODA migrates
containers). Its ids start at CPU_JOB_ID_BASE so they never collide with a GPU trace's.

CSV format::

    job_id,user,arrival_s,cpus,mem_gb,duration_s
    1000000,etl,0.0,4,16,1800
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from synergy.scheduler.model import Job, JobKind
from synergy.scheduler.profiles.format import SensitivityProfile
from synergy.scheduler.simulator.engine import SimResult
from synergy.scheduler.simulator.errors import SimInputError

CPU_JOB_ID_BASE = 1_000_000
COLUMNS = ("job_id", "user", "arrival_s", "cpus", "mem_gb", "duration_s")
HOUR = 3600.0


@dataclass(frozen=True)
class CpuTraceJob:
    job_id: int
    user: str
    arrival_s: float
    cpus: float
    mem_gb: float
    duration_s: float


@dataclass(frozen=True)
class CpuJobParams:
    """A generated CPU-only trace: Poisson arrivals, exponential durations, fixed shape."""

    rate_per_h: float
    cpus: float = 4.0
    mem_gb: float = 16.0
    duration_h: float = 0.5
    #: Users the jobs are dealt to round-robin (DRF is between users).
    users: int = 4

    def check(self) -> None:
        for flag, value in (("--cpu-jobs-per-h", self.rate_per_h), ("--cpu-job-cpus", self.cpus),
                            ("--cpu-job-mem-gb", self.mem_gb), ("--cpu-job-duration-h", self.duration_h)):
            if not (value > 0 and math.isfinite(value)):
                raise SimInputError(f"{flag} must be a positive number, got {value}")


def generate_cpu_jobs(params: CpuJobParams, until_s: float, rng: np.random.Generator) -> tuple[CpuTraceJob, ...]:
    """CPU-only jobs arriving over [0, until_s) at `params.rate_per_h`."""
    params.check()
    out: list[CpuTraceJob] = []
    t = float(rng.exponential(HOUR / params.rate_per_h))
    while t < until_s:
        i = len(out)
        duration = max(1.0, float(rng.exponential(params.duration_h * HOUR)))
        out.append(CpuTraceJob(CPU_JOB_ID_BASE + i, f"u{i % params.users}", t, params.cpus, params.mem_gb, duration))
        t += float(rng.exponential(HOUR / params.rate_per_h))
    return tuple(out)


def read_cpu_trace(path: str | Path) -> tuple[CpuTraceJob, ...]:
    """Parse and validate a CPU-only trace; every problem names the row and the field."""
    path = Path(path)
    try:
        rows = list(csv.reader(path.read_text().splitlines()))
    except (OSError, UnicodeDecodeError) as exc:
        raise SimInputError(f"--cpu-trace {path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    if not rows or sorted(h.strip() for h in rows[0]) != sorted(COLUMNS):
        raise SimInputError(f"--cpu-trace {path}: header must name the columns {','.join(COLUMNS)}")
    col = {h.strip(): i for i, h in enumerate(rows[0])}
    out: list[CpuTraceJob] = []
    seen: set[int] = set()
    for n, fields in enumerate(rows[1:], start=1):
        if not any(f.strip() for f in fields):
            continue
        where = f"--cpu-trace {path} row {n}"
        if len(fields) != len(COLUMNS):
            raise SimInputError(f"{where}: expected {len(COLUMNS)} fields, got {len(fields)}")
        get = {name: fields[i].strip() for name, i in col.items()}
        try:
            job_id = int(get["job_id"])
        except ValueError:
            raise SimInputError(f"{where}: field 'job_id' must be a whole number, got {get['job_id']!r}") from None
        if job_id < CPU_JOB_ID_BASE or job_id in seen:
            raise SimInputError(f"{where}: field 'job_id' must be unique and >= {CPU_JOB_ID_BASE}, got {job_id}")
        seen.add(job_id)
        values = {}
        for name in ("arrival_s", "cpus", "mem_gb", "duration_s"):
            try:
                values[name] = float(get[name])
            except ValueError:
                raise SimInputError(f"{where}: field {name!r} must be a number, got {get[name]!r}") from None
            low_ok = values[name] >= 0 if name == "arrival_s" else values[name] > 0
            if not (low_ok and math.isfinite(values[name])):
                raise SimInputError(f"{where}: field {name!r} must be {'>= 0' if name == 'arrival_s' else '> 0'}, "
                                    f"got {get[name]}")
        out.append(CpuTraceJob(job_id, get["user"], values["arrival_s"], values["cpus"], values["mem_gb"],
                               values["duration_s"]))
    return tuple(sorted(out, key=lambda j: (j.arrival_s, j.job_id)))


def to_jobs(trace: Sequence[CpuTraceJob], profile: SensitivityProfile) -> list[Job]:
    """Core jobs; `profile` is a placeholder the core never reads for a CPU-only job."""
    return [Job(t.job_id, "cpu-only", 0, t.arrival_s, t.duration_s, profile, kind=JobKind.CPU_ONLY,
                cpus=t.cpus, mem_gb=t.mem_gb, user=t.user) for t in trace]


def cpu_job_metrics(result: SimResult, trace: Sequence[CpuTraceJob]) -> dict[str, Any]:
    """CPU-only jobs' JCT and queueing (over those that completed while the GPU jobs ran)."""
    recs = [result.records[t.job_id] for t in trace if t.job_id in result.records]
    jct = np.array([r.completion_s - r.arrival_s for r in recs if r.completion_s is not None], dtype=float)
    waits = np.array([r.first_start_s - r.arrival_s for r in recs if r.first_start_s is not None], dtype=float)
    return {
        "cpu_jobs": len(recs),
        "cpu_jobs_completed": int(jct.size),
        "cpu_avg_jct_h": float(jct.mean()) / HOUR if jct.size else None,
        "cpu_p95_jct_h": float(np.percentile(jct, 95)) / HOUR if jct.size else None,
        "cpu_avg_queue_delay_h": float(waits.mean()) / HOUR if waits.size else None,
        "cpu_started_within_3min": float((waits <= 180.0).mean()) if waits.size else None,
    }
