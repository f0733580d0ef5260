"""Periodic events (skylet style): each a small class with an interval and a `run`.

The event loop runs them on one background thread; an event that raises is logged with
its traceback and runs again at its next interval; it never takes the daemon down.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

from synergy.scheduler.daemon.clock import Clock
from synergy.scheduler.daemon import collector
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.jobs import JobBook
from synergy.scheduler.daemon.leases import LeaseBook
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.nodes import NodeBook
from synergy.scheduler.daemon.profiling import ProfilingBook
from synergy.scheduler.daemon.records import JobState
from synergy.scheduler.daemon.rounds import RoundLoop
from synergy.scheduler.daemon.metrics import set_resources
from synergy.scheduler.daemon.records import JobRecord
from synergy.scheduler.daemon.servicers.admin_servicer import proportional_share
from synergy.scheduler.daemon.users import usage_by_user
from synergy.scheduler.model import Cluster, Resources


#: An event taking longer than this is logged (it holds up RPCs waiting for the state lock).
SLOW_EVENT_S = 0.05


class Parts(Protocol):
    """What events need from the assembled daemon (see app.App)."""

    ctx: DaemonContext
    jobs: JobBook
    nodes: NodeBook
    leases: LeaseBook
    rounds: RoundLoop
    profiling: ProfilingBook


class PeriodicEvent:
    name = "event"

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.ctx = parts.ctx

    @property
    def interval_s(self) -> float:
        raise NotImplementedError

    def run(self) -> None:
        raise NotImplementedError


class RoundEvent(PeriodicEvent):
    """Decides each round `plan_lead` ahead of its boundary and applies it at the boundary."""

    name = "round"

    @property
    def interval_s(self) -> float:
        return min(0.5, self.ctx.config.round_s / 20)

    def run(self) -> None:
        self.parts.rounds.tick()


class LeaseExpiryEvent(PeriodicEvent):
    """Requeues jobs whose processes stopped renewing their leases."""

    name = "lease-expiry"

    @property
    def interval_s(self) -> float:
        return min(1.0, self.ctx.config.renew_interval_s)

    def run(self) -> None:
        self.parts.leases.expire()


class ProfilingEvent(PeriodicEvent):
    """Places jobs waiting for a profiling lease (profiling.py), ahead of the round's queue."""

    name = "profiling"

    @property
    def interval_s(self) -> float:
        return min(1.0, self.ctx.config.heartbeat_interval_s)

    def run(self) -> None:
        self.parts.profiling.place()


class NodeLivenessEvent(PeriodicEvent):
    """Marks silent nodes lost and requeues their jobs; enforces reclaim deadlines."""

    name = "node-liveness"

    @property
    def interval_s(self) -> float:
        return min(1.0, self.ctx.config.heartbeat_interval_s)

    def run(self) -> None:
        self.parts.nodes.check_liveness()
        self.parts.nodes.loans.enforce()


class ProgressFlushEvent(PeriodicEvent):
    """Persists steps, throughput and GPU-seconds that renewals keep in memory.

    Every running job is flushed once per `min(60, round)` seconds, a slice of them (by job
    id) at a time: ten slices, more where a tenth would exceed `MAX_SLICE` jobs, spread evenly
    over that period. The records are worked out without the state lock and saved under it a
    hundred at a time (`JobBook.flush_progress`). A thousand jobs flushed at once under the lock
    held it and the interpreter for 50-100 ms, and the RPCs in flight meanwhile were the
    slowest 1% of the load benchmark; without the lock, the work still takes the interpreter
    from the gRPC loop for as long as it runs, hence the cap. When the slice count changes
    (the running jobs crossed a multiple of `MAX_SLICE`), a job may wait one period more.
    `flush_all` (at shutdown) flushes every job.
    """

    name = "progress-flush"
    SLICES = 10
    MAX_SLICE = 200

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._slice = 0

    @property
    def slices(self) -> int:
        return max(self.SLICES, -(-len(self.ctx.live.jobs) // self.MAX_SLICE))

    @property
    def interval_s(self) -> float:
        return min(60.0, self.ctx.config.round_s) / self.slices

    def run(self) -> None:
        n = self.slices
        k = self._slice % n
        self._slice = (k + 1) % n
        # Only jobs with a live entry have anything to flush; list() copies the keys at once.
        self.parts.jobs.flush_progress(sorted(i for i in list(self.ctx.live.jobs) if i % n == k))

    def flush_all(self) -> None:
        self.parts.jobs.flush_progress(sorted(self.ctx.live.jobs))


class CadenceEvent(PeriodicEvent):
    """Stretches the renewal and heartbeat intervals, and the timeouts counted in them, when
    the round's cadence would ask synergyd for more calls a second than --max-rpc-rate, and
    eases them back when it would not (cadence.py). Logged and exported when it changes."""

    name = "cadence"

    @property
    def interval_s(self) -> float:
        return 1.0

    def run(self) -> None:
        ctx, cfg = self.ctx, self.ctx.config
        if cfg.max_rpc_rate <= 0:
            return
        with ctx.lock:  # a count the store keeps: no walk over the jobs every second
            ranks = ctx.store.renewing_ranks()
            nodes = sum(1 for n in ctx.live.nodes.values() if not n.lost)
        asked = ranks / cfg.renew_interval_s + nodes / cfg.heartbeat_interval_s
        cadence, now = ctx.cadence, ctx.clock.now()
        was = cadence.stretch
        hold = was * (max(cfg.lease_grace, cfg.node_timeout) + max(cfg.renew_interval_s, cfg.heartbeat_interval_s))
        if cadence.update(asked, now, hold):
            ctx.metrics.cadence_stretch.set(cadence.stretch)
            event(ctx.log, "daemon.cadence", level=logging.WARNING if cadence.stretch > was else logging.INFO,
                  asked_rpc_s=round(asked), max_rpc_rate=cfg.max_rpc_rate, ranks=ranks, nodes=nodes,
                  stretch=round(cadence.stretch, 3), renew_interval_s=round(ctx.renew_interval_s, 3),
                  heartbeat_interval_s=round(ctx.heartbeat_interval_s, 3),
                  lease_grace_s=round(ctx.lease_grace(now), 3), node_timeout_s=round(ctx.node_timeout(now), 3))


class GcSweepEvent(PeriodicEvent):
    """Once an hour, the garbage collector walks everything it froze (collector.py): cycles
    among objects frozen since are freed. A pause of a full walk (0.4-0.8 s at 10,000 jobs)."""

    name = "gc-sweep"
    slow_s = 5.0  # the walk is the point: logged as slow only beyond this

    @property
    def interval_s(self) -> float:
        return collector.SWEEP_S

    def run(self) -> None:
        collector.sweep()


class GcYoungEvent(PeriodicEvent):
    """Twice a second, the young generations are collected and their survivors frozen
    (collector.py): a few milliseconds each, instead of the 30-113 ms collections CPython's
    own trigger let grow at 10,000 jobs."""

    name = "gc-young"

    @property
    def interval_s(self) -> float:
        return collector.YOUNG_S

    def run(self) -> None:
        collector.collect_young()


def refresh_gauges(parts: Parts) -> None:
    """Set the queue, job-state, node and resource gauges from the current state.

    Run when /metrics is scraped (app.App hooks it to the metrics server), the only reader of
    the gauges. A periodic event also ran it once a minute, for no reader: at 10,000 jobs it
    held the state lock and the interpreter for 45-100 ms (its first run 1.9 s) and lay under
    54% of the slowest 1% of calls (daemon_load.py --attribute, docs/daemon.md)."""
    ctx, m = parts.ctx, parts.ctx.metrics
    now = ctx.clock.now()
    checkpoints: list[tuple[str, float, int]] = []
    with ctx.lock:
        counts = ctx.store.state_counts()
        for job in ctx.store.active_jobs():
            if job.state == JobState.RUNNING:
                since = job.checkpoint_at or job.started_at
                checkpoints.append((str(job.id), max(0.0, now - since), job.checkpoint_step))
        views = parts.nodes.list()
        placed = [j for j in ctx.store.active_jobs() if j.placed]
        users = usage_by_user(ctx.store.active_jobs())
        cluster = parts.rounds.cluster()
    m.job_checkpoint_age.clear()
    m.job_checkpoint_step.clear()
    for job_id, age, step in checkpoints:
        m.job_checkpoint_age.labels(job_id).set(age)
        m.job_checkpoint_step.labels(job_id).set(step)
    for state, n in counts.items():
        m.jobs.labels(state.value).set(n)
    m.queue_length.set(counts[JobState.QUEUED])
    m.running_jobs.set(counts[JobState.RUNNING])
    capacity, allocated = Resources(), Resources()
    node_states: dict[str, int] = {"ready": 0, "cordoned": 0, "draining": 0, "lost": 0}
    for v in views:
        node_states[v.state] = node_states.get(v.state, 0) + 1
        if v.state in ("ready", "cordoned"):
            capacity = capacity + v.record.allocatable
            allocated = allocated + v.allocated
    for state, n in node_states.items():
        m.nodes.labels(state).set(n)
    free = capacity - allocated
    for kind, value in (("capacity", capacity), ("allocated", allocated), ("free", free)):
        set_resources(m.resources, (kind,), value)
    _job_gauges(parts, placed, cluster)
    for gauge in (m.user_jobs, *m.user_allocated.values()):
        gauge.clear()
    for u in users.values():
        m.user_jobs.labels(u.user, "running").set(u.running)
        m.user_jobs.labels(u.user, "waiting").set(u.waiting)
        set_resources(m.user_allocated, (u.user,), u.allocated)


def _job_gauges(parts: Parts, placed: list[JobRecord], cluster: Cluster) -> None:
    """Per placed job: what it holds, its GPU-proportional share, its throughput; jobs no
    longer placed drop out (the label sets are cleared first)."""
    m = parts.ctx.metrics
    for gauge in (*m.job_allocated.values(), *m.job_proportional_share.values(), m.job_throughput):
        gauge.clear()
    for job in placed:
        labels = (str(job.id), job.name)
        set_resources(m.job_allocated, labels, sum((p.resources for p in job.placements), Resources()))
        share = proportional_share(job, cluster)
        if share is not None:
            set_resources(m.job_proportional_share, labels, share)
        m.job_throughput.labels(*labels).set(parts.jobs.view(job).samples_per_s)


@dataclass
class EventLoop:
    events: Sequence[PeriodicEvent]
    clock: Clock
    log: logging.Logger

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # a start that failed before it stops it too
            self._thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def run_once(self) -> None:
        for ev in self.events:
            self.run_one(ev)

    def run_one(self, ev: PeriodicEvent) -> None:
        started = time.perf_counter()
        try:
            ev.run()
        except Exception:  # noqa: BLE001 (an event must never kill the daemon)
            event(self.log, "event.failed", logging.ERROR, exc_info=True, name=ev.name)
        took = time.perf_counter() - started
        if took > getattr(ev, "slow_s", SLOW_EVENT_S):  # events hold the state lock: a slow one delays RPCs
            event(self.log, "event.slow", logging.WARNING, name=ev.name, took_ms=round(took * 1000, 1))
        else:  # debug: `benchmarks/daemon_load.py --attribute` lines RPC latencies up with these
            event(self.log, "event.ran", logging.DEBUG, name=ev.name, took_ms=round(took * 1000, 3))

    def _loop(self) -> None:
        due = {id(ev): 0.0 for ev in self.events}
        while not self._stop.is_set():
            now = time.monotonic()
            for ev in self.events:
                if now >= due[id(ev)]:
                    self.run_one(ev)
                    due[id(ev)] = now + ev.interval_s
            wait = min(due.values()) - time.monotonic()
            if self.clock.wait(max(wait, 0.01), self._stop):
                return
