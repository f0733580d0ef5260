"""What every piece of daemon logic shares: settings, clock, store, live view, one lock.

One re-entrant lock serialises every state change. Decisions are short (the slow part, the
core's round decision, runs outside it on a snapshot), and a single lock makes "nothing is
scheduled twice" an easy property to keep.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Iterable

from synergy.scheduler.daemon.cadence import Cadence
from synergy.scheduler.daemon.clock import Clock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.decider import Decider, InlineDecider
from synergy.scheduler.daemon.live import LiveState
from synergy.scheduler.daemon.logs import LOGGER
from synergy.scheduler.daemon.metrics import Metrics
from synergy.scheduler.daemon.profiles import ProfileBook
from synergy.scheduler.daemon.records import JobRecord
from synergy.scheduler.daemon.store import StateStore
from synergy.scheduler.daemon.progress import ProgressBook
from synergy.scheduler.daemon.tasklogs import TaskLogs


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class DaemonContext:
    config: DaemonConfig
    clock: Clock
    store: StateStore
    profiles: ProfileBook
    metrics: Metrics = field(default_factory=Metrics)
    live: LiveState = field(default_factory=LiveState)
    lock: threading.RLock = field(default_factory=threading.RLock)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger(LOGGER))
    #: sha256(job token) -> job id, so the auth guard can check tokens without the lock.
    job_tokens: dict[str, int] = field(default_factory=dict)
    #: When this daemon process took over the state (what it launched before is unknown).
    started_at: float = 0.0
    #: Where rounds are decided (synergyd: a worker process for large rounds; see decider.py).
    decider: Decider = field(default_factory=InlineDecider)
    #: Task output relayed from heartbeats for `synergy logs` (live only).
    task_logs: TaskLogs = field(default_factory=TaskLogs)
    #: Per-job throughput baselines for the agents' contention eliminator (live only).
    progress: ProgressBook = field(default_factory=ProgressBook)
    #: The round's cadence, stretched under load (cadence.py): read the intervals and timeouts
    #: below, not the config's, which are the unstretched ones.
    cadence: Cadence = field(init=False)

    def __post_init__(self) -> None:
        self.started_at = self.started_at or self.clock.now()
        self.cadence = Cadence(self.config.max_rpc_rate)
        for job_id, token in self.store.job_tokens():
            self.job_tokens[token_digest(token)] = job_id

    @property
    def renew_interval_s(self) -> float:
        """How often ranks are told to renew now."""
        return self.config.renew_interval_s * self.cadence.stretch

    @property
    def heartbeat_interval_s(self) -> float:
        """How often agents are told to heartbeat now."""
        return self.config.heartbeat_interval_s * self.cadence.stretch

    def lease_grace(self, now: float) -> float:
        return self.config.lease_grace * self.cadence.timeouts(now)

    def node_timeout(self, now: float) -> float:
        return self.config.node_timeout * self.cadence.timeouts(now)

    def heartbeat_window(self, now: float) -> float:
        return self.config.heartbeat_window * self.cadence.timeouts(now)

    def save_jobs(self, changes: Iterable[tuple[JobRecord | None, JobRecord]]) -> None:
        """Commit (old, new) job pairs in one transaction, then count the new transitions.
        A job that ended leaves the live state and its parsed profiles: its progress is in its
        record by then, and kept, they grew with every job that ever ran (every progress flush
        walks the live entries)."""
        changes = list(changes)
        self.store.save_jobs(new for _, new in changes)
        for old, new in changes:
            if new.state.terminal:
                self.live.jobs.pop(new.id, None)
                self.profiles.forget(new.id)
            for t in new.history[len(old.history) if old is not None else 0 :]:
                self.metrics.transitions.labels(t.to_state.value).inc()
                if t.to_state.terminal:
                    self.metrics.job_migrations.observe(new.migrations)
            self.job_tokens.setdefault(token_digest(new.token), new.id)
