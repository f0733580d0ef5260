"""Where a round is decided: on the calling thread, or in a worker process of its own.

The core is pure (`Scheduler.schedule(RoundInput) -> RoundOutput` takes and returns plain,
picklable data), so the daemon can decide a round in another process, and it does for
large rounds because of the GIL. RPCs are answered on one grpc.aio event-loop thread; a
decision of a thousand jobs on the round thread holds the interpreter for tens of
milliseconds, handing it over only every `sys.setswitchinterval`, and a renewal needs it
several times. Measured with `benchmarks/daemon_load.py --attribute`, the slowest 1% of
RPCs were the ones that overlapped a decision. In a worker process the decision costs the
daemon only pickling the input and unpickling the output (a few ms for a thousand jobs),
and the worker runs at a lower CPU priority, so that on a busy machine the RPCs win the
cores: a round is decided `plan_lead` ahead of its boundary and can afford to wait.

Small rounds are decided inline: there the round trip would cost more than the decision,
and tests and small clusters start no extra process. The worker is started the first time
a round is large enough (that round is still decided inline, while it starts).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import threading
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

from synergy.scheduler.core import Scheduler, preload
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.model import RoundInput, RoundOutput

#: Rounds with fewer active jobs than this are decided inline: a TUNE decision of a couple
#: of hundred jobs takes a few ms, about what the round trip to the worker costs.
PROCESS_MIN_JOBS = 200
#: How much lower the worker's CPU priority is (`nice`); deciding is never urgent.
WORKER_NICENESS = 10
#: How often a waiting round checks that the worker is still alive.
POLL_S = 0.5


class Decider(Protocol):
    def decide(self, scheduler: Scheduler, inp: RoundInput) -> RoundOutput:
        """`scheduler.schedule(inp)`, wherever it runs: the answer is the same."""
        ...

    def close(self) -> None: ...


@dataclass
class InlineDecider:
    """Decides on the calling thread (unit tests, and `SYNERGYD_DECIDER=inline`)."""

    log: logging.Logger | None = None

    def decide(self, scheduler: Scheduler, inp: RoundInput) -> RoundOutput:
        started = time.perf_counter()
        out = scheduler.schedule(inp)
        if self.log is not None:
            _decided(self.log, "inline", inp, started)
        return out

    def close(self) -> None:
        pass


class WorkerLost(RuntimeError):
    pass


def _serve(conn: Connection) -> None:
    """The worker process: decide each (scheduler, input) it receives, until the pipe closes
    (the daemon stopped, or was killed: then `recv` raises EOFError and the worker ends).

    It keeps the scheduler it was first sent while the daemon's compares equal, so that
    what a mechanism memoises across rounds (OPT's solved programs) survives, as it does
    in the daemon's own copy when deciding inline.
    """
    try:
        os.nice(WORKER_NICENESS)
    except OSError:
        pass
    preload()  # now, while the daemon decides the round that started it inline
    current: Scheduler | None = None
    while True:
        try:
            sent, inp = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if sent != current:
            current = sent
        scheduler = current
        try:
            reply: tuple[bool, Any] = (True, scheduler.schedule(inp))
        except Exception:  # noqa: BLE001 (the daemon logs it as a failed round)
            reply = (False, traceback.format_exc())
        conn.send(reply)


class _Worker:
    """One spawned process (never forked: a fork would copy gRPC's threads mid-flight)."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), name="synergyd-decider", daemon=True)
        self.proc.start()
        child.close()

    def call(self, scheduler: Scheduler, inp: RoundInput) -> RoundOutput:
        message = pickle.dumps((scheduler, inp), protocol=pickle.HIGHEST_PROTOCOL)  # a PicklingError is ours
        try:
            self.conn.send_bytes(message)
        except OSError as exc:  # the worker is gone: broken pipe
            raise WorkerLost(str(exc)) from None
        while not self.conn.poll(POLL_S):
            if not self.proc.is_alive():
                raise WorkerLost(f"exit code {self.proc.exitcode}")
        try:
            ok, value = self.conn.recv()
        except (EOFError, OSError) as exc:
            raise WorkerLost(str(exc)) from None
        if not ok:
            raise RuntimeError(f"the round failed in the decider process:\n{value}")
        return value

    def stop(self) -> None:
        self.conn.close()
        self.proc.terminate()
        self.proc.join(timeout=5)


@dataclass
class ProcessDecider:
    """Decides rounds of `min_jobs` or more jobs in a worker process.

    If the worker dies (killed, out of memory) or the input cannot be pickled, that round is
    decided inline and logged; a lost worker is replaced for the next round. A round is
    never lost to the mechanism that moves it elsewhere.
    """

    log: logging.Logger
    min_jobs: int = PROCESS_MIN_JOBS
    _worker: _Worker | None = field(default=None, init=False, repr=False)
    #: One round at a time (the round thread is the only caller, this only makes it safe).
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def decide(self, scheduler: Scheduler, inp: RoundInput) -> RoundOutput:
        started = time.perf_counter()
        where, out = self._decide(scheduler, inp)
        _decided(self.log, where, inp, started)
        return out

    def _decide(self, scheduler: Scheduler, inp: RoundInput) -> tuple[str, RoundOutput]:
        if len(inp.jobs) < self.min_jobs:
            return "inline", scheduler.schedule(inp)
        with self._lock:
            if self._closed:
                return "inline", scheduler.schedule(inp)
            if self._worker is None:
                self._worker = _Worker()  # starts in the background; this round stays inline
                event(self.log, "decider.started", pid=self._worker.proc.pid, jobs=len(inp.jobs))
                return "inline", scheduler.schedule(inp)
            try:
                return "worker", self._worker.call(scheduler, inp)
            except WorkerLost as exc:
                if self._closed:  # stopped by close(): the daemon is shutting down
                    raise
                event(self.log, "decider.worker_lost", logging.ERROR, reason=str(exc))
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                event(self.log, "decider.not_picklable", logging.WARNING, error=str(exc))
            self._worker.stop()  # lost, or the pipe may hold half a message: start afresh
            self._worker = None
        return "inline", scheduler.schedule(inp)

    def close(self) -> None:
        """Stop the worker. Does not wait for a round in progress (it fails instead)."""
        self._closed = True
        worker = self._worker
        if worker is not None:
            worker.stop()


def _decided(log: logging.Logger, where: str, inp: RoundInput, started: float) -> None:
    # Debug level: `benchmarks/daemon_load.py --attribute` lines RPC latencies up with it.
    event(log, "round.decided", logging.DEBUG, where=where, jobs=len(inp.jobs),
          ms=round((time.perf_counter() - started) * 1000, 3))


def from_env(value: str | None, log: logging.Logger) -> Decider:
    """The daemon's decider: a worker process for large rounds, unless `value` (the
    `SYNERGYD_DECIDER` environment variable) is `inline`, which decides every round on the
    round thread as before the worker existed (kept for A/B measurements)."""
    if (value or "").strip().lower() == "inline":
        return InlineDecider(log)
    return ProcessDecider(log)
