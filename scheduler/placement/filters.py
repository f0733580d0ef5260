"""Filter plug-ins: which servers may host work this round, and why not (Kubernetes' Filter).

Each filter looks at one server (plain data on `Server`, the time in `RoundInput`) and
answers with an `Admit` level and, below ANY, a reason in words. The core runs every filter
on every server, keeps the most restrictive answer, and

* packs new work only onto servers every filter admits (ANY);
* leaves a running job on a HELD server exactly where it is (its whole previous allocation,
  kept as it is and not offered to the mechanism), so "cordoned" means what admins expect;
* gives nothing to a NONE server (a job holding a piece there is placed anew or waits).

The reasons become the waiting reasons of the jobs the filters keep from running, so the
daemon needs no post-filter of its own and the simulator replays a cordon exactly.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, Sequence

from synergy.scheduler.model import AdminState, RoundInput, Server, ServerPool


class Admit(int, enum.Enum):
    """How much of a server the round may use; a larger value is more restrictive."""

    #: Any job may be given any free share of it.
    ANY = 0
    #: A running job keeps exactly what it holds there (`RoundInput.previous`); nothing new.
    HELD = 1
    #: Nothing runs there.
    NONE = 2


@dataclass(frozen=True)
class Verdict:
    admit: Admit
    #: Why not ANY, in words a user can act on ("node n1 is cordoned"); "" for ANY.
    reason: str = ""


OPEN = Verdict(Admit.ANY)


class Filter(Protocol):
    name: str

    def check(self, server: Server, inp: RoundInput) -> Verdict:
        ...


@dataclass(frozen=True)
class TrainingPool:
    """Training jobs run on the training pool and on servers loaned from inference; CODA's CPU
    array (the CPU_ONLY pool) is admitted too, and the core gives it to CPU-only jobs alone.

    A LOANED server is admitted here; the core gives it to loanable jobs only
    (`loaning/passes.py`), since which jobs may go there is a property of the job.
    """

    name: str = "training_pool"

    def check(self, server: Server, inp: RoundInput) -> Verdict:
        if server.pool in (ServerPool.TRAINING, ServerPool.LOANED, ServerPool.CPU_ONLY):
            return OPEN
        return Verdict(Admit.NONE, f"node {server.id} is in the {server.pool.value} pool")


@dataclass(frozen=True)
class Cordon:
    """An admin's cordon (keep what runs there, add nothing) and drain (run nothing)."""

    name: str = "cordon"

    def check(self, server: Server, inp: RoundInput) -> Verdict:
        if server.admin == AdminState.CORDONED:
            return Verdict(Admit.HELD, f"node {server.id} is cordoned")
        if server.admin == AdminState.DRAINING:
            return Verdict(Admit.NONE, f"node {server.id} is draining")
        return OPEN


@dataclass(frozen=True)
class Heartbeat:
    """A server silent for longer than `RoundInput.heartbeat_window_s` gets nothing new.

    Its jobs' leases expire before the node is declared lost; without this filter the
    round right after would place them straight back on the silent server. Jobs still
    running there keep their place until the shell declares the node lost.
    """

    name: str = "heartbeat"

    def check(self, server: Server, inp: RoundInput) -> Verdict:
        if server.last_heartbeat_s is None:
            return OPEN
        silent = inp.now_s - server.last_heartbeat_s
        if silent <= inp.heartbeat_window_s:
            return OPEN
        return Verdict(Admit.HELD, f"node {server.id} missed heartbeats for {silent:.1f} s")


#: The filters a Scheduler runs unless told otherwise, in the order their reasons are read.
DEFAULT_FILTERS: tuple[Filter, ...] = (TrainingPool(), Cordon(), Heartbeat())


def run_filters(filters: Sequence[Filter], server: Server, inp: RoundInput) -> Verdict:
    """The most restrictive verdict of `filters` on `server` (the first one on a tie)."""
    worst = OPEN
    for f in filters:
        v = f.check(server, inp)
        if v.admit > worst.admit:
            worst = v
    return worst
