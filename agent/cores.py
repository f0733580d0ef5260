"""CPU cores: Linux cpu-list syntax ("0-3,8") and choosing exclusive cores for a task.

A placement gives a task a number of CPUs, possibly fractional (0.5 CPU per task on a 2-core,
4-GPU node); the agent turns it into whole cores no other task holds plus, for the
remainder, the pool of cores nobody holds whole (`CoreGrant`). The CPU quota (cgroups) then
holds the total exactly.
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
    """The cores one task holds: whole cores of its own, plus the node's shared pool.

    A task with `c` CPUs gets floor(c) exclusive cores; its remainder (all of it below one
    CPU) runs on the shared pool: every usable core no task holds whole, shared by all the
    fractional tasks, each held to its own CPU time by its quota. Whenever the placements add
    up to at most the agent's cores, the fractions add up to at most the pool, so a layout
    always exists. (Packing each fraction onto one core, as before, is bin packing: 0.75 +
    0.5 + 0.5 + 0.25 on two cores fits only in one order, and three 0.6s never do, so tasks
    the round had fitted failed to launch or to resize.) The pool changes as whole cores are
    taken and given back; `pool_of` says what it is now, and the supervisor moves every
    fractional task onto it.
    """

    exclusive: tuple[int, ...] = ()
    #: the pool this task runs its fraction on (empty: whole cores only)
    shared: tuple[int, ...] = ()
    fraction: float = 0.0

    @property
    def cores(self) -> tuple[int, ...]:
        """The task's cpuset: its own cores and the pool it shares."""
        return tuple(sorted(set(self.exclusive) | set(self.shared)))


def split_cpus(cpus: float) -> tuple[int, float]:
    """A CPU share -> (whole cores, fraction of a shared core); 0 CPUs still needs a place to run."""
    if not math.isfinite(cpus) or cpus < 0:
        raise CoreError(f"placement.cpus must be a finite number >= 0, got {cpus}")
    whole = math.floor(cpus + _EPS)
    frac = cpus - whole
    return whole, (frac if frac > _EPS else 0.0)


def pool_of(usable: Iterable[int], held: Iterable[CoreGrant]) -> tuple[int, ...]:
    """The shared pool: the usable cores no grant holds whole."""
    taken = {c for g in held for c in g.exclusive}
    return tuple(sorted(set(usable) - taken))


def pool_load(held: Iterable[CoreGrant]) -> float:
    """CPUs the fractional tasks run on the pool."""
    return sum(g.fraction for g in held if g.shared)


def choose_cores(cpus: float, usable: Iterable[int], held: Iterable[CoreGrant] = (),
                 keep: CoreGrant | None = None) -> CoreGrant:
    """Cores for a task that needs `cpus`, beside the `held` grants of the node's other tasks.

    Whole cores: the task's own (`keep`, a resize) first, then the lowest ones nobody holds
    whole (a pool core may become whole: its fractional tasks move onto the rest of the
    pool). The fraction runs on the pool that is left. Raises CoreError when the cores held
    whole, or the fractions on what is left, would exceed the agent's cores.
    """
    whole, frac = split_cpus(cpus)
    on_pool = frac > 0 or whole == 0
    held = list(held)
    usable_set = set(usable)
    free = list(pool_of(usable_set, held))
    kept = [c for c in (keep.exclusive if keep is not None else ()) if c in free]
    order = kept + [c for c in free if c not in kept]
    exclusive = tuple(sorted(order[:whole]))
    pool = tuple(c for c in free if c not in exclusive)
    load = pool_load(held) + frac
    others_on_pool = any(g.shared for g in held)
    if len(exclusive) < whole or ((on_pool or others_on_pool) and not pool) or load > len(pool) + _EPS:
        what = f"{whole} whole cores" + (f" and {frac:g} CPU on the shared pool" if frac else "")
        if whole == 0 and not frac:
            what = "a core to run on"
        raise CoreError(
            f"needs {what} for {cpus:g} CPUs, but {len(usable_set) - len(free)} of the agent's {len(usable_set)} "
            f"cores ({format_cpu_list(usable_set) or 'none'}) are held whole and the other tasks run "
            f"{pool_load(held):g} CPUs on the rest"
        )
    return CoreGrant(exclusive, pool if on_pool else (), frac if on_pool else 0.0)
