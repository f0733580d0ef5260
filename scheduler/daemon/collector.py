"""Full garbage collections that do not stall synergyd at 10,000 jobs.

CPython's full collection walks every object the collector tracks, with the GIL held. At
10,000 running jobs synergyd holds about a million (job records, and per running rank a
renewal stream with its task, frames and gRPC call), so a full collection took 0.4-0.8 s,
during which no RPC was answered; one ran every minute or so as records were replaced
(`daemon_load.py --jobs 10000 --agents 256 --round-s 300`: p99 0.57-0.67 s, and 39 ms with
this, docs/daemon.md).

After each full collection synergyd freezes the survivors (`gc.freeze`: moved to a
generation no collection walks), so the next full collection walks only what was allocated
since. A frozen object that later becomes part of unreachable cycle is not freed by those
collections, so once an hour (`SWEEP_S`, `events.GcSweepEvent`) everything is unfrozen and
walked once: one pause of the old length an hour instead of one a minute.

Young collections stalled synergyd as well, for another reason. CPython starts one when
allocations minus deallocations pass a threshold (700), and synergyd mostly replaces
long-lived objects: each renewal message leaves its stream a new awaitable that waits for the
next (30 s at the production cadence), each heartbeat replaces its node's 40 task reports.
Every deallocation of an old object cancels an allocation in that count, so the young
generations grew to 50,000-130,000 survivors before one was collected, and generation 1
collections took 30-113 ms (lying under two thirds of the slowest 1% of RPCs at 10,000 jobs,
docs/daemon.md). So every `YOUNG_S` synergyd collects the young generations itself and
freezes what survives (`collect_young`, `events.GcYoungEvent`): a collection walks what half
a second left alive, and nothing reaches the old generation unfrozen. Cycles among objects
frozen young are freed by the hourly sweep, as those frozen old are.

Process-wide, so installed by synergyd's entry point (main.py), not by an in-process App.
"""

from __future__ import annotations

import gc
from typing import Any

#: How often the frozen objects are unfrozen and walked once (their cyclic garbage freed).
SWEEP_S = 3600.0
#: How often the young generations are collected and their survivors frozen (`collect_young`).
YOUNG_S = 0.5


def freeze_after_full_collections() -> None:
    """From now on, each full collection freezes what survived it (once per process)."""
    if _freeze not in gc.callbacks:
        gc.callbacks.append(_freeze)


def stop_freezing() -> None:
    """Undo `freeze_after_full_collections`: every frozen object is tracked again."""
    if _freeze in gc.callbacks:
        gc.callbacks.remove(_freeze)
    gc.unfreeze()


def collect_young() -> int:
    """Collect generations 0 and 1, then freeze everything that survived; returns what the
    collection freed. The pause is what the young generations hold: what survived since the
    last call, not what CPython's allocation count let pile up."""
    found = gc.collect(1)
    gc.freeze()
    return found


def sweep() -> int:
    """Unfreeze everything and collect it in one full walk (after which the survivors are
    frozen again); returns what the collection freed."""
    gc.unfreeze()
    return gc.collect()


def _freeze(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()
