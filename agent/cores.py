"""CPU cores: Linux cpu-list syntax ("0-3,8") and choosing exclusive cores for a task.

A placement gives a task a number of CPUs (fractional when a job is split over nodes); the
agent turns it into concrete cores, rounded up, that no other task on the node holds, so
tasks never share a core. The CPU quota (cgroups) then holds a fractional share exactly.
Pure functions, no I/O: unit-tested in tests/agent/test_cores.py.
"""

from __future__ import annotations

import math
from typing import Iterable


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


def cores_needed(cpus: float) -> int:
    """Whole cores for a CPU share: rounded up, at least one (a process needs somewhere to run)."""
    if not math.isfinite(cpus) or cpus < 0:
        raise CoreError(f"placement.cpus must be a finite number >= 0, got {cpus}")
    return max(1, math.ceil(cpus - 1e-9))


def choose_cores(cpus: float, usable: Iterable[int], taken: Iterable[int], keep: Iterable[int] = ()) -> tuple[int, ...]:
    """Cores for a task that needs `cpus`: the ones it `keep`s first (a resize), then the lowest free.

    `usable` is the agent's slice minus reserved cores; `taken` are held by other tasks.
    Raises CoreError when the free cores are too few.
    """
    n = cores_needed(cpus)
    usable_set = set(usable)
    taken_set = set(taken)
    kept = [c for c in sorted(set(keep)) if c in usable_set and c not in taken_set][:n]
    free = [c for c in sorted(usable_set - taken_set) if c not in kept]
    if len(kept) + len(free) < n:
        raise CoreError(
            f"needs {n} exclusive cores for {cpus:g} CPUs, but only {len(kept) + len(free)} of the agent's "
            f"{len(usable_set)} cores ({format_cpu_list(usable_set) or 'none'}) are free"
        )
    return tuple(sorted(kept + free[: n - len(kept)]))
