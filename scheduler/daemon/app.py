"""The composition root: builds every part of synergyd from its config, starts and stops it.

Nothing here decides anything; it wires the logic (jobs, nodes, leases, rounds,
reconciler), the servicers, the gRPC server and the metrics endpoint together in the one
order that is safe: lock the state dir, open the store, recover, then listen.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
from dataclasses import dataclass
from typing import Sequence

from synergy.scheduler.backends.slurm.bridge import SlurmBridge
from synergy.scheduler.daemon.auth import AuthGuard
from synergy.scheduler.daemon.clock import Clock, SystemClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.decider import from_env as decider_from_env
from synergy.scheduler.daemon.decoding import strict_decoding
from synergy.scheduler.daemon.events import EventLoop, PeriodicEvent, ProgressFlushEvent, refresh_gauges
from synergy.scheduler.daemon.jobs import JobBook
from synergy.scheduler.daemon.leases import LeaseBook
from synergy.scheduler.daemon.logs import LOGGER, event
from synergy.scheduler.daemon.metrics import Metrics, MetricsServer
from synergy.scheduler.daemon.nodes import NodeBook
from synergy.scheduler.daemon.profiles import ProfileBook, load_zoo
from synergy.scheduler.daemon.profiling import ProfilingBook
from synergy.scheduler.daemon.reconciler import Reconciler
from synergy.scheduler.daemon.records import JobState
from synergy.scheduler.daemon.rounds import RoundLoop
from synergy.scheduler.daemon.server import LoopThread, Servers, build
from synergy.scheduler.daemon.servicers.admin_servicer import VERSION, AdminServicer
from synergy.scheduler.daemon.servicers.job_servicer import JobServicer
from synergy.scheduler.daemon.servicers.node_servicer import NodeServicer
from synergy.scheduler.daemon.store import StateStore, open_store
from synergy.scheduler.daemon.unixsocket import UnixFront, path_problem, unreachable_because
from synergy.scheduler.daemon.users import UserBook
from synergy.scheduler.dashboard.history import History
from synergy.scheduler.dashboard.server import DashboardServer, SampleEvent
from synergy.scheduler.statedir import (
    ADDRESS_FILE,
    ADMIN_TOKEN_FILE,
    AGENT_ADDRESS_FILE,
    CLUSTER_TOKEN_FILE,
    DASHBOARD_ADDRESS_FILE,
    METRICS_ADDRESS_FILE,
    StateDir,
)


@dataclass
class Logic:
    """Everything that decides, none of what talks: the part unit tests drive directly."""

    ctx: DaemonContext
    jobs: JobBook
    reconciler: Reconciler
    nodes: NodeBook
    leases: LeaseBook
    rounds: RoundLoop
    profiling: ProfilingBook

    @classmethod
    def build(cls, ctx: DaemonContext) -> Logic:
        jobs = JobBook(ctx)
        reconciler = Reconciler(ctx, jobs)
        nodes = NodeBook(ctx, jobs, reconciler)
        rounds = RoundLoop(ctx, jobs, nodes)
        nodes.loans.core_jobs = rounds.core_jobs  # a reclaim reads elastic ranges as the rounds do
        profiling = ProfilingBook(ctx, jobs, lambda: rounds.snapshot()[0],
                                   lambda: rounds.pending.allocations if rounds.pending else {},
                                   lambda: rounds.granted)
        return cls(ctx, jobs, reconciler, nodes, LeaseBook(ctx, jobs), rounds, profiling)

    def recover(self) -> None:
        """Settle jobs a crash left between two steps of admission or preemption."""
        ctx = self.ctx
        with ctx.lock:
            now = ctx.clock.now()
            for job in ctx.store.profiled_jobs():  # the profile store lives in the job records
                ctx.profiles.learn(job)
            changes = []
            for job in ctx.store.active_jobs():
                new = job
                if new.state == JobState.SUBMITTED:
                    new = new.to(JobState.PROFILING, "recovered after a restart", now)
                # A job being profiled (placed, or waiting for a node to profile on) stays so.
                profiling = new.state == JobState.PROFILING and (new.placed or ctx.profiles.needs_profiling(new))
                if new.state == JobState.PREEMPTED or (new.state == JobState.PROFILING and not profiling):
                    new = new.to(
                        JobState.QUEUED, "recovered after a restart", now, profile_source=ctx.profiles.source(new)
                    )
                if new is not job:
                    changes.append((job, new))
            if changes:
                ctx.save_jobs(changes)
            counts = {s.value: n for s, n in ctx.store.state_counts().items() if n}
        event(ctx.log, "synergyd.recovered", jobs=counts, nodes=len(ctx.store.nodes()))


class App:
    def __init__(self, config: DaemonConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.log = logging.getLogger(LOGGER)
        self.state_dir = StateDir(config.state_dir)
        self.servers: Servers | None = None
        self.loop: LoopThread | None = None
        self.metrics_server: MetricsServer | None = None
        self.dashboard: DashboardServer | None = None
        self.events: EventLoop | None = None
        #: The Slurm bridge's own loop (--backend slurm), apart so Slurm's commands never delay rounds.
        self.backend_events: EventLoop | None = None
        self.store: StateStore | None = None
        self.unix_front: UnixFront | None = None
        self.job_service: JobServicer | None = None
        self.address = ""
        #: Set to stop the daemon (signals, or a damaged database); main waits on it.
        self.stopping = threading.Event()
        #: Why the database stopped being usable while running (main then exits with code 3).
        self.damaged: str | None = None

    def start(self, event_types: Sequence[type[PeriodicEvent]]) -> None:
        cfg = self.config
        warn = self._warn_state_dir
        socket_path = cfg.unix_socket_path
        if socket_path is not None and cfg.unix_socket is None and path_problem(socket_path):
            event(self.log, "unix_socket.off", logging.WARNING, path=str(socket_path),
                  message=f"no Unix socket: {path_problem(socket_path)}; pass --unix-socket PATH")
            socket_path = None
        in_state_dir = socket_path is not None and socket_path.parent.resolve() == cfg.state_dir.resolve()
        self.state_dir.open(warn, 0o711 if in_state_dir else 0o700)
        # The database before the tokens: a start that dies in between (a full disk) leaves
        # a database without tokens, which the next start completes, never tokens without it.
        self.store = open_store(cfg.state_dir, self._database_damaged, cfg.finished_jobs_in_memory)
        admin_token = self.state_dir.token(cfg.admin_token_file, ADMIN_TOKEN_FILE, warn)
        cluster_token = self.state_dir.token(cfg.cluster_token_file, CLUSTER_TOKEN_FILE, warn)
        self.started_at = self.clock.now()
        self.ctx = ctx = DaemonContext(
            cfg, self.clock, self.store, ProfileBook(load_zoo(cfg.profiles), live_profiling=cfg.resizes_in_place), Metrics(), log=self.log,
            decider=decider_from_env(os.environ.get("SYNERGYD_DECIDER"), self.log),
        )
        logic = Logic.build(ctx)
        self.jobs, self.reconciler, self.nodes = logic.jobs, logic.reconciler, logic.nodes
        self.leases, self.rounds, self.profiling = logic.leases, logic.rounds, logic.profiling
        logic.recover()
        self.users = UserBook(self.store, self.clock)
        change = self.users.ensure_builtin_admin(admin_token)  # the upgrade path from one shared token
        if change:
            event(self.log, "users.admin_token", message=change)
        auth = AuthGuard(
            self.users, cluster_token, ctx.job_tokens, ctx.metrics, self.log, agent_mtls=cfg.tls_client_ca is not None
        )
        # --backend slurm: checked (SlurmRefused) before synergyd listens.
        bridge = SlurmBridge.for_config(ctx, self.nodes) if cfg.backend == "slurm" else None
        self.loop = LoopThread()
        self.job_service = JobServicer(ctx, self.leases)
        self.servers = servers = self.loop.run(
            build(
                cfg,
                [auth, strict_decoding],
                AdminServicer(ctx, self.jobs, self.nodes, self.rounds, self.started_at, self.users),
                self.job_service,
                NodeServicer(ctx, self.nodes),
                self.state_dir.previous_ports(),
                local_port=socket_path is not None,
            )
        )
        extra: list[PeriodicEvent] = []
        if cfg.dashboard_port is not None:  # the dashboard's charts over time need samples
            self.history = History()
            extra.append(SampleEvent(self, self.history))
        self.events = EventLoop([*(t(self) for t in event_types), *extra], self.clock, self.log)
        if bridge is not None:
            self.backend_events = bridge.serving(f"{cfg.host}:{servers.port}")
        self.loop.run(servers.server.start())
        if socket_path is not None and servers.local_port is not None:
            self.unix_front = UnixFront(socket_path, servers.local_port, self.log)
            self.loop.run(self.unix_front.start())
            auth.local_peers = self.unix_front.peers
            why = unreachable_because(socket_path)
            if why:
                event(self.log, "unix_socket.unreachable", logging.WARNING, path=str(socket_path),
                      message=f"other users cannot reach the socket: {why}; pass --unix-socket in a directory "
                              "they may enter, or a --state-dir outside a private home")
        self.loop.run(servers.set_serving(True))
        self.address = f"{cfg.host}:{self.servers.port}"
        self.state_dir.write_address(ADDRESS_FILE, self.address)
        self.state_dir.remember_ports(self.servers.port, self.servers.agent_port)
        if self.servers.agent_port is not None:
            self.state_dir.write_address(AGENT_ADDRESS_FILE, f"{cfg.host}:{self.servers.agent_port}")
        if cfg.metrics_port is not None:
            self.metrics_server = MetricsServer(
                ctx.metrics, cfg.host, cfg.metrics_port, self.healthy, refresh=lambda: refresh_gauges(self)
            )
            self.metrics_server.start()
            self.state_dir.write_address(METRICS_ADDRESS_FILE, f"{cfg.host}:{self.metrics_server.port}")
        if cfg.dashboard_port is not None:
            self.dashboard = DashboardServer(self, self.history, cfg.dashboard_host, cfg.dashboard_port, self.users)
            self.dashboard.start()
            self.state_dir.write_address(DASHBOARD_ADDRESS_FILE, f"{cfg.dashboard_host}:{self.dashboard.port}")
        self.events.start()
        if self.backend_events is not None:
            self.backend_events.start()
        event(
            self.log,
            "synergyd.started",
            version=VERSION,
            address=self.address,
            state_dir=str(cfg.state_dir),
            policy=self.rounds.policy,
            mechanism=self.rounds.mechanism,
            borrow_fraction=cfg.borrow_fraction,
            trim_training=cfg.trim_training,
            packing=f"{len(self.rounds.pairs)} pairs from {cfg.pairs}" if self.rounds.pairs is not None else "off",
            round_s=cfg.round_s,
            tls=cfg.tls_cert is not None,
            unix_socket=str(socket_path) if self.unix_front is not None else None,
            agent_port=self.servers.agent_port,
            metrics_port=self.metrics_server.port if self.metrics_server else None,
            dashboard_port=self.dashboard.port if self.dashboard else None,
        )

    def healthy(self) -> bool:
        return self.servers is not None and self.events is not None and self.events.alive and self.damaged is None

    def _warn_state_dir(self, message: str) -> None:
        event(self.log, "statedir.warning", logging.WARNING, message=message)

    def _database_damaged(self, exc: sqlite3.DatabaseError) -> None:
        """A write found the database damaged: say so loudly, stop serving, and exit (code 3).

        Answering UNAVAILABLE forever would look like a transient fault; exiting lets a
        supervisor notice, and the next start refuses with the integrity check's finding
        until the database is restored (docs/daemon.md, "Damaged or full state dir").
        May run on any thread, the gRPC loop's included, so it only schedules and signals.
        """
        self.damaged = f"database {self.state_dir.database} is damaged ({exc})"
        event(
            self.log,
            "store.damaged",
            logging.CRITICAL,
            error=str(exc),
            database=str(self.state_dir.database),
            action="health NOT_SERVING; stopping with exit code 3; restore a backup (synergy admin restore)",
        )
        if self.servers is not None and self.loop is not None:
            asyncio.run_coroutine_threadsafe(self.servers.set_serving(False), self.loop.loop)
        self.stopping.set()

    def stop(self, grace_s: float = 5.0) -> None:
        """Graceful: stop answering, finish in-flight RPCs, persist progress, release the dir."""
        if self.unix_front is not None and self.loop is not None:
            self.loop.run(self.unix_front.stop())
        if self.servers is not None:
            self.loop.run(self.servers.set_serving(False))
            if self.job_service is not None:  # open renewal streams would hold the grace period
                self.loop.loop.call_soon_threadsafe(self.job_service.end_streams)
            self.loop.run(self.servers.server.stop(grace_s), timeout=grace_s + 10)
        if self.backend_events is not None:
            self.backend_events.stop()
        if self.loop is not None:
            self.loop.stop()
        if self.events is not None:
            self.events.stop()
            for ev in self.events.events:
                if isinstance(ev, ProgressFlushEvent) and self.damaged is None:
                    try:
                        ev.flush_all()
                    except Exception:  # noqa: BLE001 (still release the state dir)
                        event(self.log, "event.failed", logging.ERROR, exc_info=True, name=ev.name)
        if hasattr(self, "ctx"):
            self.ctx.decider.close()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        if self.dashboard is not None:
            self.dashboard.stop()
        if self.store is not None:
            self.store.close()
        self.state_dir.close()
        if self.servers is not None:  # a refused start says so in one line, not two
            event(self.log, "synergyd.stopped")
