"""synergyd: the Synergy scheduler daemon (`synergyd --help`).

The whole daemon, declared: these periodic events, around the services that app.App wires.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
from typing import Sequence

from synergy.scheduler.daemon.app import App
from synergy.scheduler.daemon.config import ConfigError, load_config
from synergy.scheduler.daemon.events import (
    GaugeEvent,
    LeaseExpiryEvent,
    NodeLivenessEvent,
    ProgressFlushEvent,
    RoundEvent,
)
from synergy.scheduler.daemon.logs import configure
from synergy.scheduler.daemon.server import BindError
from synergy.scheduler.daemon.statedir import StateDirError
from synergy.scheduler.daemon.store import StoreError
from synergy.scheduler.profiles.format import ProfileError

EVENTS = (RoundEvent, LeaseExpiryEvent, NodeLivenessEvent, ProgressFlushEvent, GaugeEvent)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        print(f"synergyd: {exc}", file=sys.stderr)
        return 2
    configure(config.log_level, config.log_format)
    # RPCs run on one event-loop thread while rounds are decided on another; hand the GIL
    # over every 1 ms instead of 5 so that a long decision delays a renewal by less.
    sys.setswitchinterval(0.001)
    app = App(config)
    try:
        app.start(EVENTS)
    except (StateDirError, StoreError, BindError, ProfileError, OSError) as exc:
        print(f"synergyd: {exc}", file=sys.stderr)
        app.stop(grace_s=0)
        return 1
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` dumps every thread's stack
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print(f"synergyd listening on {app.address}", flush=True)  # after the handlers: a SIGTERM now is graceful
    # Timed waits: a signal may land on one of gRPC's threads, and the handler only runs
    # when the main thread executes bytecode; an untimed wait could sleep through SIGTERM.
    while not done.wait(0.2):
        pass
    app.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
