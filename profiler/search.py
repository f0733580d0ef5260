"""Synergy's optimistic CPU search (§3.1 of the paper): which CPU counts to profile.

The paper, §3.1: "We start with the maximum CPU allocation and do a binary search on the CPU
values to estimate job throughput. If the profiled point resulted in a throughput improvement
that is less than a fixed threshold (say 10%), then we continue binary search on the lower half
of CPU values, else we profile more points on the upper half. The idea here is to empirically
profile CPU regions that show significant difference in job throughput, while skip those
regions with little to no improvement in throughput." (8 points instead of 24 for ResNet18.)

How that reads as an algorithm here:

* The measured points cut 0..max_cpus into intervals; the lowest interval starts at an implicit
  (0 CPUs, 0 samples/s). An interval is *open* while it holds an unmeasured CPU count and its
  ends differ by the threshold or more (``hi >= (1 + threshold) * lo``, either direction, so a
  curve that falls with more CPUs is explored too). The lowest interval is open until 1 CPU
  is measured: nothing says how fast the job runs on one core until it is measured.
* The next point is the midpoint of the *highest* open interval: after a point p in (a, b), if
  p improved on a by the threshold or more, (p, b) is still open and is searched first ("more
  points on the upper half"); if not, (p, b) is closed and the search goes on below ("continue
  on the lower half").
* It stops when no interval is open (the curve is known: between any two neighbouring measured
  points throughput changes by less than the threshold, so a straight line between them is
  within the threshold of any monotone curve through them) or after `max_points` points.

Pure and deterministic: the caller measures (see `synergy.profiler.window`) and records.
"""
from __future__ import annotations

import math

from synergy.profiler.curve import MeasuredCurve

#: Knee tolerance of the best-case demand (docs/profiles.md: within 1% of saturation).
KNEE_TOLERANCE = 0.01


class OptimisticSearch(MeasuredCurve):
    """Chooses the CPU counts to profile; `next_cpus()` until None, `record()` each result."""

    def __init__(self, max_cpus: int, threshold: float = 0.10, max_points: int = 8) -> None:
        super().__init__(max_cpus)
        if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold > 0):
            raise ValueError(f"threshold must be a positive number, got {threshold!r}")
        if isinstance(max_points, bool) or not isinstance(max_points, int) or max_points < 1:
            raise ValueError(f"max_points must be a positive integer, got {max_points!r}")
        self.threshold = float(threshold)
        self.max_points = max_points

    # -- the protocol shared with CodaSearch -----------------------------------------------
    def next_cpus(self) -> int | None:
        """The CPU count to profile next, or None when the curve is known (or out of points).

        Asking twice without a `record` in between returns the same count.
        """
        if not self._measured:
            return self.max_cpus
        if len(self._measured) >= self.max_points:
            return None
        interval = self._highest_open()
        if interval is None:
            return None
        lo, hi = interval
        return (lo + hi) // 2

    def record(self, cpus: int, samples_per_s: float) -> None:
        """Record the throughput measured at `cpus` (any count in 1..max_cpus, once each)."""
        self._add(cpus, samples_per_s)

    # -- helpers ---------------------------------------------------------------------------
    def interpolate(self, cpus: float) -> float:
        """Throughput at `cpus` read off the measured points: linear between them, linear
        to zero below the lowest one, flat above the highest (as docs/profiles.md reads a grid)."""
        return interpolate(self.points, cpus)

    def knee(self, tolerance: float = KNEE_TOLERANCE) -> int | None:
        """Fewest measured CPUs within `tolerance` of the best measured throughput."""
        return knee(self.points, tolerance)

    def _highest_open(self) -> tuple[int, int] | None:
        pts = [(0, 0.0), *self.points]
        gaps = [i for i in reversed(range(len(pts) - 1)) if pts[i + 1][0] - pts[i][0] >= 2]
        for i in gaps:  # first the shape: highest interval a straight line may miss by the threshold
            if _error_bound(pts, i) >= self.threshold:
                return pts[i][0], pts[i + 1][0]
        knee_at = knee(self.points)
        for i in gaps:  # then the knee, to one CPU
            if pts[i + 1][0] == knee_at and _knee_unsettled(pts, i):
                return pts[i][0], pts[i + 1][0]
        return None


def _line(p: tuple[int, float], q: tuple[int, float]):
    """The straight line through two points, as a function of CPUs."""
    (x0, y0), (x1, y1) = p, q
    slope = (y1 - y0) / (x1 - x0)
    return lambda x: y0 + slope * (x - x0)


def _upper_bound(pts: list[tuple[int, float]], i: int):
    """The highest a curve through `pts` can be inside (pts[i], pts[i+1]).

    Rising and concave (diminishing returns, Fig. 2 of the paper): the curve is below its
    right end and below the neighbouring chords extended into the interval. Where the points
    themselves are not rising and concave (noise, oversubscription), only the larger end
    bounds it, which is the paper's end-to-end rule.
    """
    (a, ta), (b, tb) = pts[i], pts[i + 1]
    slopes = [(y1 - y0) / (x1 - x0) for (x0, y0), (x1, y1) in zip(pts, pts[1:])]
    lo, hi = max(i - 1, 0), min(i + 2, len(slopes))
    near = slopes[lo:hi]
    eps = 1e-9 * max(abs(s) for s in near)  # float rounding of equal slopes
    shaped = all(s >= -eps for s in near) and all(s0 >= s1 - eps for s0, s1 in zip(near, near[1:]))
    if not shaped:
        top = max(ta, tb)
        return lambda x: top
    bounds = [_line(pts[i - 1], pts[i])] if i >= 1 else []
    if i + 2 < len(pts):
        bounds.append(_line(pts[i + 1], pts[i + 2]))
    return lambda x: min([tb, *(f(x) for f in bounds)])


def _error_bound(pts: list[tuple[int, float]], i: int) -> float:
    """Largest relative error of the straight line between pts[i] and pts[i+1], at any
    unmeasured integer CPU count between them, for any curve the bound allows."""
    (a, _), (b, _) = pts[i], pts[i + 1]
    chord, upper = _line(pts[i], pts[i + 1]), _upper_bound(pts, i)
    worst = 0.0
    for x in range(a + 1, b):
        low = chord(x)
        if low <= 0:
            return math.inf
        worst = max(worst, (upper(x) - low) / low)
    return worst


def _knee_unsettled(pts: list[tuple[int, float]], i: int) -> bool:
    """Whether the knee could lie more than one CPU below pts[i+1], the lowest measured
    point within KNEE_TOLERANCE of the best: some CPU count two or more below it may reach
    the knee level under the upper bound."""
    (a, _), (b, _) = pts[i], pts[i + 1]
    level = (1.0 - KNEE_TOLERANCE) * max(t for _, t in pts)
    upper = _upper_bound(pts, i)
    return any(upper(x) >= level for x in range(a + 1, b - 1))



def interpolate(points: list[tuple[int, float]], cpus: float) -> float:
    """Piecewise-linear throughput through `points` (sorted by CPUs), through (0, 0) below."""
    if not points:
        raise ValueError("no points measured")
    prev = (0.0, 0.0)
    for c, t in points:
        if cpus <= c:
            (a, ta), (b, tb) = prev, (c, t)
            return ta + (tb - ta) * (cpus - a) / (b - a)
        prev = (c, t)
    return points[-1][1]


def knee(points: list[tuple[int, float]], tolerance: float = KNEE_TOLERANCE) -> int | None:
    """Fewest CPUs among `points` whose throughput is within `tolerance` of the best."""
    if not points:
        return None
    best = max(t for _, t in points)
    return min(c for c, t in points if t >= (1.0 - tolerance) * best)
