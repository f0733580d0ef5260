"""CPU cores: Linux cpu-list syntax ("0-3,8") and choosing exclusive cores for a task.

A placement gives a task a number of CPUs, possibly fractional (0.5 CPU per task on a 2-core,
4-GPU node); the agent turns it into whole cores no other task holds plus, for the
remainder, a share of a core kept for fractional shares (`CoreGrant`). The CPU quota
(cgroups) then holds the total exactly.
Pure functions, no I/O: unit-tested in tests/agent/test_agent_units.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

#: Tolerance for sums of fractional CPUs (0.1 + 0.2 is not 0.3 in floats).
_EPS = 1e-9


class CoreError(ValueError):
    """A cpu list that does not parse, or a request the free cores cannot meet."""


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """"0-3,8" -> (0, 1, 2, 3, 8); sorted, without duplicates."""
    out: set[int] = set()
    text = text.strip()
    if not text:
        return ()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise CoreError(f"{part!r} is not a core number or a range like 0-3") from None
        if first < 0 or last < first:
            raise CoreError(f"{part!r} is not a valid core range")
        out.update(range(first, last + 1))
    return tuple(sorted(out))


def format_cpu_list(cores: Iterable[int]) -> str:
    """(0, 1, 2, 3, 8) -> "0-3,8"."""
    items = sorted(set(cores))
    parts: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        parts.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class CoreGrant:
    """The cores one task holds: whole cores of its own, plus a share of one shared core.

    A task with `c` CPUs gets floor(c) exclusive cores and, for the remainder, `fraction`
    of a core it shares with other fractional tasks (the fractions on one core add up to at
    most 1). The CPU quota (c cores of CPU time) then holds the total exactly. A core that
    hosts fractional shares is never handed out whole, so whole cores stay exclusive.
    """

    exclusive: tuple[int, ...] = ()
    shared: int | None = None
    fraction: float = 0.0

    @property
    def cores(self) -> tuple[int, ...]:
        """The task's cpuset: its own cores and its shared core."""
        extra = () if self.shared is None else (self.shared,)
        return tuple(sorted(set(self.exclusive) | set(extra)))


def split_cpus(cpus: float) -> tuple[int, float]:
    """A CPU share -> (whole cores, fraction of a shared core); 0 CPUs still needs a place to run."""
    if not math.isfinite(cpus) or cpus < 0:
        raise CoreError(f"placement.cpus must be a finite number >= 0, got {cpus}")
    whole = math.floor(cpus + _EPS)
    frac = cpus - whole
    return whole, (frac if frac > _EPS else 0.0)


def shared_load(held: Iterable[CoreGrant]) -> dict[int, float]:
    """Shared core -> the sum of the fractions placed on it."""
    load: dict[int, float] = {}
    for g in held:
        if g.shared is not None:
            load[g.shared] = load.get(g.shared, 0.0) + g.fraction
    return load


def choose_cores(cpus: float, usable: Iterable[int], held: Iterable[CoreGrant] = (),
                 keep: CoreGrant | None = None) -> CoreGrant:
    """Cores for a task that needs `cpus`, beside the `held` grants of the node's other tasks.

    Whole cores: the task's own (`keep`, a resize) first, then the lowest free ones. The
    fraction goes on the shared core it already has when that still fits, else on the
    fullest shared core where it fits (best fit packs fractions together), else on the
    highest free core (away from the low cores whole grants take). Raises CoreError when
    the free cores are too few.
    """
    whole, frac = split_cpus(cpus)
    need_shared = frac > 0 or whole == 0
    held = list(held)
    usable_set = set(usable)
    exclusive_taken = {c for g in held for c in g.exclusive}
    load = shared_load(held)
    free = sorted(usable_set - exclusive_taken - set(load))
    mine = keep.cores if keep is not None else ()
    kept = [c for c in mine if c in free]
    order = kept + [c for c in free if c not in kept]
    exclusive = sorted(order[:whole])
    shared: int | None = None
    if need_shared:
        fits = [c for c in load if c in usable_set and load[c] + frac <= 1 + _EPS]
        if keep is not None and keep.shared in fits:
            shared = keep.shared
        elif fits:
            shared = sorted(fits, key=lambda c: (-load[c], c))[0]
        else:
            rest = [c for c in free if c not in exclusive]
            if keep is not None and keep.shared in rest:
                shared = keep.shared
            elif rest:
                shared = rest[-1]
    if len(exclusive) < whole or (need_shared and shared is None):
        what = f"{whole} exclusive cores" + (f" and {frac:g} of a shared core" if frac else "")
        if whole == 0 and not frac:
            what = "a core to run on"
        raise CoreError(
            f"needs {what} for {cpus:g} CPUs, but only {len(free)} of the agent's {len(usable_set)} cores "
            f"({format_cpu_list(usable_set) or 'none'}) are free and no shared core has room"
        )
    return CoreGrant(tuple(exclusive), shared, frac if need_shared else 0.0)
