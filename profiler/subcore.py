"""Points below one CPU (issue 14): after a whole-CPU search, where the share calls for it.

On a node whose GPU-proportional share is below one CPU per GPU (four GPUs on two cores:
half a CPU each), whole-CPU profiles cannot tell a loading-light job (a tenth of a core) from
one that needs a whole one: both "need" 1 CPU, nothing fits, and TUNE falls back to the
proportional share for everyone. A lease with `sub_core` (the daemon sets it there) wraps
the whole-CPU search: once that is done and one CPU is within the knee tolerance of the best
point (more CPUs buy nothing), it measures `SUB_CORE_POINTS` (0.5, then 0.25 CPUs, as CFS
quota on a shared core), going lower only while the job stays that fast. The profile's
rows then start below one CPU and the core's demand can be a fraction of a core.

A lease that holds less than one CPU (`max_cpus` 0: half a core where four arrivals share
two cores, placement/profiling.py) has no whole-CPU search (`inner` None): it measures the
points below one CPU from the top, half a core (what it holds) and then a quarter while the
job stays as fast. What lies above is left to the model. Its first point is measured just
after the process started, while its neighbours start too; a quarter core measured
`RECHECK_THRESHOLD` faster than half a core (a curve falling with more CPUs: noise, not a
loader) has the half core measured once more, and the later measurement counts; the same
holds between one CPU and half a core on a whole-CPU lease. Found on
the physical run: a loading-heavy job measured 16 samples/s at half a core and 20 at a
quarter, and TUNE then gave it a quarter core, below its share.

Same protocol as the searches (`next_cpus`, `record`, `points`, `probes`), so the live
driver does not know the difference. Pure and deterministic.
"""

from __future__ import annotations

import math
from typing import Any

from synergy.profiler.search import KNEE_TOLERANCE

#: How much faster a lower point must measure than the one above it to be re-checked.
RECHECK_THRESHOLD = 0.10
from synergy.scheduler.placement.profiling import SUB_CORE_POINTS


class SubCoreSearch:
    """`inner` (a whole-CPU search), then the points below one CPU while the job keeps its
    best throughput there."""

    def __init__(self, inner: Any | None, tolerance: float = KNEE_TOLERANCE) -> None:
        self.inner = inner
        self.tolerance = tolerance
        self._below: dict[float, float] = {}
        #: Points measured a second time (`RECHECK_THRESHOLD`), and the one asked for now.
        self._rechecked: set[float] = set()
        self._recheck: float | None = None
        #: A whole-CPU point (one CPU) measured a second time: its later figure.
        self._again: dict[float, float] = {}
        #: Points at which the job used its whole quota (`saturated`): nothing is measured below.
        self._saturated: set[float] = set()

    @property
    def max_cpus(self) -> int:
        return self.inner.max_cpus if self.inner is not None else 0

    def next_cpus(self) -> float | None:
        if self.inner is not None:
            nxt = self.inner.next_cpus()
            if nxt is not None:
                return nxt
            if 1 not in dict(self.inner.points):
                return None
        values = self._values()
        self._recheck = None
        nxt = self._next_below(values)
        if nxt is None:
            self._recheck = self._inverted(values)
            nxt = self._recheck
        return nxt

    def _next_below(self, values: dict[float, float]) -> float | None:
        """The next point below one CPU to measure, while the job keeps its best there."""
        if self.inner is None:  # a lease below one CPU: from its top point down
            floor = (1.0 - self.tolerance) * max(self._below.values(), default=0.0)
        else:
            floor = (1.0 - self.tolerance) * max(v for c, v in values.items() if c >= 1)
            if values[1] < floor:
                return None  # one CPU is already slower than the best: less will not do
        if self.inner is not None and 1 in self._saturated:
            return None  # one CPU used whole: less can only be slower
        for cpus in SUB_CORE_POINTS:
            if cpus not in self._below:
                return cpus
            if self._below[cpus] < floor or cpus in self._saturated:
                return None  # slower here, or CPU-bound: the points below would be slower still
        return None

    def _inverted(self, values: dict[float, float]) -> float | None:
        """The higher of two neighbouring points (one CPU, then the points below it) when the
        lower one measured `RECHECK_THRESHOLD` faster and it was not measured twice yet."""
        chain = [1, *SUB_CORE_POINTS] if self.inner is not None else list(SUB_CORE_POINTS)
        for hi, lo in zip(chain, chain[1:]):
            if hi in values and lo in values and hi not in self._rechecked and (
                    values[lo] > (1.0 + RECHECK_THRESHOLD) * values[hi]):
                return hi
        return None

    def _values(self) -> dict[float, float]:
        """CPUs -> samples/s of every point, a re-checked one at its later figure."""
        inner = dict(self.inner.points) if self.inner is not None else {}
        return {**inner, **self._again, **self._below}

    def record(self, cpus: float, samples_per_s: float) -> None:
        if self._recheck is not None and cpus == self._recheck:
            if not (isinstance(samples_per_s, (int, float)) and math.isfinite(samples_per_s) and samples_per_s >= 0):
                raise ValueError(f"samples_per_s must be a finite number >= 0, got {samples_per_s!r}")
            (self._again if cpus >= 1 else self._below)[cpus] = float(samples_per_s)
            self._rechecked.add(cpus)
            self._recheck = None
            return
        if cpus >= 1:
            if self.inner is None:
                raise ValueError(f"cpus {cpus!r}: this lease holds less than one CPU ({SUB_CORE_POINTS})")
            self.inner.record(int(cpus), samples_per_s)
            return
        if cpus not in SUB_CORE_POINTS or cpus in self._below:
            raise ValueError(f"cpus {cpus!r}: not a point below one CPU still to measure ({SUB_CORE_POINTS})")
        if not (isinstance(samples_per_s, (int, float)) and math.isfinite(samples_per_s) and samples_per_s >= 0):
            raise ValueError(f"samples_per_s must be a finite number >= 0, got {samples_per_s!r}")
        self._below[cpus] = float(samples_per_s)

    def saturated(self, cpus: float) -> None:
        """The job used its whole quota while `cpus` was measured (the live driver's reading):
        the search measures nothing below it."""
        self._saturated.add(cpus)

    @property
    def points(self) -> list[tuple[float, float]]:
        """(cpus, samples/s) measured so far, by CPU count, the points below one CPU first
        (a re-checked point at its later figure)."""
        return sorted(self._values().items())

    @property
    def probes(self) -> int:
        return (self.inner.probes if self.inner is not None else 0) + len(self._below) + len(self._rechecked)
