"""The profile the core assumes for a job nothing has been measured for: flat above a knee.

Speed falls to half below the knee along each axis and is flat above it, so the mechanisms'
best case is exactly the knee and never more. The daemon gives it to unprofiled jobs with the
GPU-proportional share (or the user's per-GPU hints) as the knee; both shells give it to jobs
still waiting for a profiling lease, so that the round leaves them their share to be profiled
in (simulator/profiling.py, daemon/rounds.py).
"""
from __future__ import annotations

from synergy.scheduler.profiles.format import SensitivityProfile

#: Seconds per iteration assumed for a job nothing is known about (only SRTF/FTF read it).
UNKNOWN_ITER_TIME_S = 1.0


def knee_profile(model: str, task: str, cpus_per_gpu: float, mem_gb_per_gpu: float,
                 source: str = "proportional (no profile known)") -> SensitivityProfile:
    c, m = max(cpus_per_gpu, 0.01), max(mem_gb_per_gpu, 0.01)
    factors = (0.5, 1.0, 1.0)
    return SensitivityProfile(
        model=model,
        task=task,
        cpus_per_gpu=(c / 2, c, 2 * c),
        mem_gb_per_gpu=(m / 2, m, 2 * m),
        throughput=tuple(tuple(min(fc, fm) for fm in factors) for fc in factors),
        reference=(c, m),
        iter_time_s=UNKNOWN_ITER_TIME_S,
        source=source,
    )
