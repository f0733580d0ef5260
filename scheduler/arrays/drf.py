"""Dominant resource fairness inside one array (Ghodsi et al., NSDI'11; CODA §V-C).

Progressive filling: the user with the smallest dominant share (the largest of its CPU and
memory shares of the array) places its next job; a job that fits nowhere waits and its user
goes on with its next one, so a large job never blocks a smaller one that fits. Users are
`Job.user`; a job without one is its own user (the daemon's jobs today).
"""
from __future__ import annotations

import heapq
from typing import Callable, Mapping, Sequence

from synergy.scheduler.model import Job, Resources


def user_of(job: Job) -> str:
    return job.user or f"job:{job.id}"


def dominant_share(used: Resources, capacity: Resources) -> float:
    """max(CPU share, memory share) of `capacity`; a zero dimension counts as fully used."""
    def share(x: float, total: float) -> float:
        return x / total if total > 0 else (0.0 if x <= 0 else float("inf"))

    return max(share(used.cpus, capacity.cpus), share(used.mem_gb, capacity.mem_gb))


def progressive_fill(
    queues: Mapping[str, Sequence[Job]],
    capacity: Resources,
    used: Mapping[str, Resources],
    try_place: Callable[[Job], bool],
) -> None:
    """Offer each user's jobs, in queue order, by smallest dominant share first.

    `used` is what each user already holds (jobs kept in place); `try_place` places a job
    and says whether it did. Ties go to the user name, so the order is deterministic.
    """
    held = dict(used)
    heap = [(dominant_share(held.get(u, Resources()), capacity), u, 0) for u, q in queues.items() if q]
    heapq.heapify(heap)
    while heap:
        _, user, i = heapq.heappop(heap)
        job = queues[user][i]
        if try_place(job):
            held[user] = held.get(user, Resources()) + Resources(0, job.cpus, job.mem_gb)
        if i + 1 < len(queues[user]):
            heapq.heappush(heap, (dominant_share(held.get(user, Resources()), capacity), user, i + 1))
