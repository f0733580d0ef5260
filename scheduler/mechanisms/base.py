"""Mechanisms pack the ordered queue onto servers along GPU, CPU and memory.

A mechanism gets the queue already ordered by the policy and returns the round's
allocations. Shared steps live here so the mechanisms differ only where the paper says
they do.
"""
from __future__ import annotations

from typing import ClassVar, Protocol, Sequence

from synergy.scheduler.model import Job, RoundInput, RoundOutput


class Mechanism(Protocol):
    name: str
    #: True when the allocation is a function of the ordered jobs' fixed fields (id, GPUs,
    #: profile) and the cluster alone, never of progress, time or `previous`: a shell may
    #: then reuse last round's answer for the same ordered jobs.
    order_only: ClassVar[bool]
    #: True (with `order_only`) when only the jobs `runnable_by_gpu(ordered, cluster GPUs)`
    #: keeps, in that order, shape the allocation: a job it passes over changes nothing, so a
    #: shell may reuse last round's answer after arrivals that are all passed over. Shells
    #: read it with getattr(..., False): a mechanism that does not say is never skipped.
    runnable_only: ClassVar[bool]
    #: Optional (the core reads it with getattr(..., False)): True when the CPU and memory
    #: nobody demanded should go to co-located jobs that speed up with them, and what a job
    #: holds above its GPU-proportional share is a bonus a job staying where it ran may
    #: take back. The core then hands leftovers out (mechanisms/leftover.py, placement/
    #: surplus.py); `allocate`'s answer holds demands only, so packed guests and CPU-only
    #: jobs never find leftovers taken.
    #: redistribute: bool

    def allocate(self, ordered: Sequence[Job], inp: RoundInput) -> RoundOutput:
        ...


def runnable_by_gpu(ordered: Sequence[Job], free_gpus: float) -> tuple[list[Job], dict[int, str]]:
    """Top jobs, in policy order, whose GPU demand the cluster can still satisfy.

    A job is passed over only when its GPUs cannot be met (§4.2); a smaller job further down
    may still take the remaining GPUs, so no GPU idles while a job that fits waits.
    """
    runnable: list[Job] = []
    waiting: dict[int, str] = {}
    reasons: dict[tuple[int, float], str] = {}  # the long queue shares a few reasons
    left = free_gpus
    for job in ordered:
        if job.gpus <= left + 1e-9:
            runnable.append(job)
            left -= job.gpus
        else:
            reason = reasons.get((job.gpus, left))
            if reason is None:
                reason = reasons[(job.gpus, left)] = (
                    f"waiting for {job.gpus} GPUs: {max(0, int(round(left)))} left after higher-priority jobs"
                )
            waiting[job.id] = reason
    return runnable, waiting


def pack_order(jobs: Sequence[Job], demand: dict[int, tuple[float, float]],
               last: frozenset[int] = frozenset()) -> list[Job]:
    """Largest first along GPU, then CPU, then memory demand (§4.2), stable on policy order;
    the stand-ins of `last` (RoundInput.last) after every other job, whatever their demand:
    packed first, a stand-in's share left a job that had just been profiled no room."""
    # Decorated with the position rather than sorted by a key function: the same stable
    # order, without a Python call per job (TUNE sorts every runnable job every round).
    keyed = []
    for k, j in enumerate(jobs):
        c, m = demand[j.id]
        g = j.gpus
        keyed.append((j.id in last, -g, -c * g, -m * g, k))
    return [jobs[t[4]] for t in sorted(keyed)]
