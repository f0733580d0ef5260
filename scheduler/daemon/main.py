"""synergyd: the Synergy scheduler daemon (`synergyd --help`).

The whole daemon, declared: these periodic events, around the services that app.App wires.

Exit codes (docs/daemon.md): 0 stopped by SIGTERM/SIGINT; 1 cannot start (lock held, port
in use, unreadable files, a full disk); 2 a bad flag or config; 3 the database is damaged
(refused at start, or found damaged while running). Each failure is one line on stderr.
"""

from __future__ import annotations

import enum
import faulthandler
import signal
import sqlite3
import sys
import time
from typing import Sequence

from synergy.scheduler.backends.slurm.bridge import SlurmRefused
from synergy.scheduler.daemon.app import App
from synergy.scheduler.daemon.config import ConfigError, load_config
from synergy.scheduler.daemon import collector
from synergy.scheduler.daemon.events import (
    CadenceEvent,
    GcSweepEvent,
    GcYoungEvent,
    LeaseExpiryEvent,
    NodeLivenessEvent,
    ProfilingEvent,
    ProgressFlushEvent,
    RoundEvent,
)
from synergy.scheduler.daemon.logs import configure
from synergy.scheduler.daemon.server import BindError
from synergy.scheduler.profiles.format import ProfileError
from synergy.scheduler.statedir import DatabaseDamaged, StateDirError, is_corruption

EVENTS = (RoundEvent, ProfilingEvent, LeaseExpiryEvent, NodeLivenessEvent, ProgressFlushEvent, CadenceEvent,
          GcSweepEvent, GcYoungEvent)


class Exit(enum.IntEnum):
    OK = 0
    CANNOT_START = 1
    BAD_CONFIG = 2
    DAMAGED_DATABASE = 3


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        print(f"synergyd: {exc}", file=sys.stderr)
        return Exit.BAD_CONFIG
    configure(config.log_level, config.log_format)
    # RPCs run on one event-loop thread while rounds are decided on another; hand the GIL
    # over every 1 ms instead of 5 so that a long decision delays a renewal by less.
    sys.setswitchinterval(0.001)
    # Full collections walk only what is new since the last (collector.py: 0.4-0.8 s stalls at 10,000 jobs).
    collector.freeze_after_full_collections()
    app = App(config)
    try:
        app.start(EVENTS)
    except (StateDirError, BindError, ProfileError, SlurmRefused, OSError, sqlite3.Error) as exc:
        print(f"synergyd: {' '.join(str(exc).split())}", file=sys.stderr)
        app.stop(grace_s=0)
        damaged = isinstance(exc, DatabaseDamaged) or is_corruption(exc)
        return Exit.DAMAGED_DATABASE if damaged else Exit.CANNOT_START
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` dumps every thread's stack
    done = app.stopping
    # The handler only records the signal. `done.set()` in it could deadlock: the handler
    # runs on the main thread between bytecodes, possibly inside `done.wait()` while that
    # holds the event's (non-reentrant) lock, and `set()` takes the same lock; synergyd then
    # never stopped (found as a test's "did not stop within 60 s of SIGTERM", stack in
    # threading's _is_owned -> set).
    signalled: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: signalled.append(signum))
    print(f"synergyd listening on {app.address}", flush=True)  # after the handlers: a SIGTERM now is graceful
    if app.dashboard is not None:
        print(f"synergyd dashboard on http://{app.config.dashboard_host}:{app.dashboard.port}/", flush=True)
    # Timed waits: a signal may land on one of gRPC's threads, and the handler only runs
    # when the main thread executes bytecode; an untimed wait could sleep through SIGTERM.
    while not signalled and not done.is_set():
        time.sleep(0.2)
    app.stop()
    if app.damaged is not None:
        print(f"synergyd: {app.damaged}: stopped; restore a backup (docs/daemon.md)", file=sys.stderr)
        return Exit.DAMAGED_DATABASE
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
