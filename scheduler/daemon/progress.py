"""Throughput vs baseline of running training tasks, for the agents' contention eliminator.

CODA's eliminator on a node throttles a CPU-only job when a training task there slows down
under memory-bandwidth contention. The agent cannot tell "slow" on its own: the daemon hears
each job's throughput on lease renewals, so every heartbeat reply carries, per running task
of the node, the job's current throughput and its *baseline*.

Baseline = the best throughput (samples/s summed over ranks, as renewals report it) the job
has shown under its current allocation: same attempt, same placements. A resize or a new
attempt starts a new baseline, since a different allocation has a different normal speed.
A profile's prediction would be an alternative, but it is relative (1.0 = reference cell)
and often a stand-in; the observed best is in the same units as the throughput and is what
"falls below its baseline" means on this very allocation. Sampled at heartbeats (live only).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from synergy.scheduler.daemon.live import JobLive, ObservedTask, TaskKey, TaskPhase
from synergy.scheduler.daemon.records import JobRecord, JobState
from synergy.scheduler.model import Placement


@dataclass(frozen=True)
class TaskProgress:
    key: TaskKey
    throughput: float
    baseline: float


@dataclass
class _Baseline:
    attempt: int
    placements: tuple[Placement, ...]
    best: float = 0.0


@dataclass
class ProgressBook:
    baselines: dict[int, _Baseline] = field(default_factory=dict)

    def observe(self, job: JobRecord, live: JobLive | None) -> tuple[float, float]:
        """(throughput now, baseline) of a RUNNING job, updating its baseline."""
        now = live.samples_per_s if live is not None and live.attempt == job.attempt else 0.0
        b = self.baselines.get(job.id)
        if b is None or b.attempt != job.attempt or b.placements != job.placements:
            b = self.baselines[job.id] = _Baseline(job.attempt, job.placements)
        b.best = max(b.best, now)
        return now, b.best

    def for_node(self, tasks: list[ObservedTask], jobs: dict[int, JobRecord | None],
                 live: dict[int, JobLive]) -> list[TaskProgress]:
        """One entry per running task of a RUNNING job that has reported any throughput."""
        out = []
        for t in sorted(tasks, key=lambda t: t.key):
            job = jobs.get(t.key.job_id)
            if job is not None and job.state != JobState.RUNNING:
                self.baselines.pop(job.id, None)  # ended or requeued: the next run starts afresh
            if t.phase != TaskPhase.RUNNING or job is None or job.state != JobState.RUNNING:
                continue
            if t.key.attempt != job.attempt:
                continue
            now, best = self.observe(job, live.get(job.id))
            if best > 0:
                out.append(TaskProgress(t.key, now, best))
        return out
