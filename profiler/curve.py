"""What both CPU searches keep (search.py's optimistic one, coda.py's): the measured points.

One class so that the two agree on what a point is (an integer CPU count in 1..max_cpus,
measured once, a finite non-negative throughput) and on the `points` / `probes` protocol
the live driver (live.py) and the benchmark read.
"""

from __future__ import annotations

import math


class MeasuredCurve:
    """(CPUs, samples/s) points measured so far; searches subclass it."""

    def __init__(self, max_cpus: int) -> None:
        if isinstance(max_cpus, bool) or not isinstance(max_cpus, int) or max_cpus < 1:
            raise ValueError(f"max_cpus must be a positive integer, got {max_cpus!r}")
        self.max_cpus = max_cpus
        self._measured: dict[int, float] = {}

    def _add(self, cpus: int, samples_per_s: float) -> None:
        check_point(cpus, samples_per_s, self.max_cpus)
        if cpus in self._measured:
            raise ValueError(f"cpus {cpus} is already measured")
        self._measured[cpus] = float(samples_per_s)

    @property
    def points(self) -> list[tuple[int, float]]:
        """(cpus, samples/s) measured so far, by CPU count."""
        return sorted(self._measured.items())

    @property
    def probes(self) -> int:
        """How many points were measured (each one a profiling window)."""
        return len(self._measured)


def check_point(cpus: int, samples_per_s: float, max_cpus: int) -> None:
    if isinstance(cpus, bool) or not isinstance(cpus, int) or not 1 <= cpus <= max_cpus:
        raise ValueError(f"cpus must be an integer in 1..{max_cpus}, got {cpus!r}")
    if not (isinstance(samples_per_s, (int, float)) and math.isfinite(samples_per_s) and samples_per_s >= 0):
        raise ValueError(f"samples_per_s must be a finite number >= 0, got {samples_per_s!r}")
