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
loader) has the half core measured once more, and the later measurement counts. Found on
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

    @property
    def max_cpus(self) -> int:
        return self.inner.max_cpus if self.inner is not None else 0

    def next_cpus(self) -> float | None:
        if self.inner is None:  # a lease below one CPU: from its top point down
            floor = (1.0 - self.tolerance) * max(self._below.values(), default=0.0)
        else:
            nxt = self.inner.next_cpus()
            if nxt is not None:
                return nxt
            whole = dict(self.inner.points)
            if 1 not in whole:
                return None
            floor = (1.0 - self.tolerance) * max(whole.values())
            if whole[1] < floor:
                return None  # one CPU is already slower than the best: less will not do
        for cpus in SUB_CORE_POINTS:
            if cpus not in self._below:
                return cpus
            if self._below[cpus] < floor:
                break  # slower here: the points below would be slower still
        self._recheck = self._inverted() if self.inner is None else None
        return self._recheck

    def _inverted(self) -> float | None:
        """The higher of two neighbouring points below one CPU when the lower one measured
        `RECHECK_THRESHOLD` faster and it was not measured twice yet (None: none)."""
        for hi, lo in zip(SUB_CORE_POINTS, SUB_CORE_POINTS[1:]):
            if hi in self._below and lo in self._below and hi not in self._rechecked and (
                    self._below[lo] > (1.0 + RECHECK_THRESHOLD) * self._below[hi]):
                return hi
        return None

    def record(self, cpus: float, samples_per_s: float) -> None:
        if cpus >= 1:
            if self.inner is None:
                raise ValueError(f"cpus {cpus!r}: this lease holds less than one CPU ({SUB_CORE_POINTS})")
            self.inner.record(int(cpus), samples_per_s)
            return
        again = cpus == self._recheck
        if cpus not in SUB_CORE_POINTS or (cpus in self._below and not again):
            raise ValueError(f"cpus {cpus!r}: not a point below one CPU still to measure ({SUB_CORE_POINTS})")
        if not (isinstance(samples_per_s, (int, float)) and math.isfinite(samples_per_s) and samples_per_s >= 0):
            raise ValueError(f"samples_per_s must be a finite number >= 0, got {samples_per_s!r}")
        if again:
            self._rechecked.add(cpus)
            self._recheck = None
        self._below[cpus] = float(samples_per_s)

    @property
    def points(self) -> list[tuple[float, float]]:
        """(cpus, samples/s) measured so far, by CPU count, the points below one CPU first."""
        return sorted([*self._below.items(), *(self.inner.points if self.inner is not None else ())])

    @property
    def probes(self) -> int:
        return (self.inner.probes if self.inner is not None else 0) + len(self._below) + len(self._rechecked)
