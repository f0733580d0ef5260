"""Periodic checkpoints: when a running job is due one, and the step every rank takes it at.

The daemon agrees the step the way it agrees a stop step (leases.py): the furthest step any
rank reported plus enough steps to cover two renewal intervals, so every rank hears it before
it gets there. That margin needs the job's pace: no step is agreed until every rank has renewed
with a pace above zero (at first none is known, the margin would be one step, and a rank already
past it snapshotted a later step than the others: a step dir with one rank's file, CI saw it). The agreement lives in memory (`JobLive.checkpoint_at`): one is pending until
every rank has renewed past it (written, or skipped because the previous write was still in
flight: the job says which), then the next interval starts. A daemon restart starts the
interval again; a rank that heard a step before the restart still takes it, so a multi-rank
job may then have one step dir holding only some ranks' files, which resume never picks
(only reported checkpoints are resumed from, and retention counts complete ones only).
"""

from __future__ import annotations

import math

from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.live import JobLive
from synergy.scheduler.daemon.records import JobRecord

#: Steps an agreed step may lie ahead of the furthest rank, whatever speed a job claims.
MAX_MARGIN = 100_000


def margin(live: JobLive, renew_interval_s: float) -> int:
    """Steps ahead of the furthest rank an agreed step (stop or checkpoint) lies: two renewal
    intervals (the interval in force, stretched under load) at the job's pace."""
    return min(MAX_MARGIN, max(1, math.ceil(live.steps_per_s * 2 * renew_interval_s)))


def every_s(job: JobRecord, cfg: DaemonConfig) -> float:
    """The job's interval (its own, else the cluster's); 0 when it takes no periodic checkpoints."""
    spec = job.spec
    if not spec.checkpoint_dir or spec.cpu_only or job.profiling_lease:
        return 0.0
    return spec.checkpoint_every_s or cfg.checkpoint_every_s


def _paced(job: JobRecord, live: JobLive) -> bool:
    """Every rank has renewed, each with a pace: the margin covers them all."""
    ranks = live.ranks
    return len(ranks) >= len(job.placements) and all(r.steps_per_s > 0 for r in ranks.values())


def _passed(job: JobRecord, live: JobLive) -> bool:
    ranks = live.ranks
    return len(ranks) >= len(job.placements) and min(r.step for r in ranks.values()) >= live.checkpoint_at


def due(job: JobRecord, live: JobLive, now: float, cfg: DaemonConfig) -> int | None:
    """The step to tell a renewing rank (0 = none pending); None when the pending one must
    change first (call `advance` under the daemon's lock)."""
    every = every_s(job, cfg)
    if not every:
        return 0
    if live.checkpoint_at:
        return None if _passed(job, live) else live.checkpoint_at
    return None if now - (live.checkpoint_base or live.since) >= every and _paced(job, live) else 0


def advance(job: JobRecord, live: JobLive, now: float, cfg: DaemonConfig, renew_interval_s: float) -> int:
    """Under the lock: close a pending checkpoint every rank passed, agree the next one if due."""
    if live.checkpoint_at and _passed(job, live):
        live.checkpoint_at, live.checkpoint_base = 0, now
    every = every_s(job, cfg)
    if every and not live.checkpoint_at and now - (live.checkpoint_base or live.since) >= every and _paced(job, live):
        live.checkpoint_at = live.step + margin(live, renew_interval_s)
    return live.checkpoint_at
