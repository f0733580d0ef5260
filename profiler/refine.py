"""Above the lease, and after it: an optimistic guess, then online refinement (issue 14).

A profiling lease takes only free room (placement/profiling.py), so on a busy node it holds
little: half a core where four arrivals share two cores. What the job would do with more is
not measured there. Left flat (the profile format clamps above its last row), a job whose
throughput still climbs at the top of its lease is never given more than it was measured at,
and TUNE can only match the proportional share.

Two halves, both pure (the clock and the allocation are passed in):

* `optimistic_points`: when the top measured point is still `threshold` (10%, the search's)
  faster than the one below, one more row is added at twice its CPUs, on the straight line
  through the two (an upper bound for a concave, diminishing-returns curve: §3.1's shape, so
  optimistic, as the paper's search is). A lone point at which the job used its whole quota
  (CPU-bound, so nothing was measured below it: subcore.py) is climbing too: the line then
  runs through the origin (no CPU, no progress), again an upper bound for a concave curve.
  The profile says so in its source. Two caps keep the guess physical. The line through the
  top two points can be steeper than the line through the origin when one of them read low
  (a loading-heavy job measured 40.2, 50.2 and 88.0 samples/s at 0.5, 0.75 and 1 CPU beside
  starting arrivals, and the line put 2 CPUs at 239 samples/s): a concave curve through the
  origin never gains more than in proportion to its CPUs, so the guess is at most that.
  And no allocation of CPUs shortens the part of an iteration that is device time: the wrap
  measures how long the training script holds each batch and how much of that its process
  spent on a CPU (`StepCeiling`); the rest, the GPU step, bounds the speed any CPU count
  can reach (that job's step was 40 ms of device time: 100 samples/s at 4 a batch).
* `Refiner`: after profiling the job runs on, renewing its lease; whenever the allocation in
  force settles on a CPU count not measured yet (a round gave it more, or less), it measures a
  window of real iterations there and the point joins the curve, and the caller reports the
  refined profile (`ReportProfile` again; the daemon replaces the job's profile and the next
  round uses it). A guess the job does not live up to is thereby corrected within a round or
  two, at the cost of a few iterations at an allocation the round gave it anyway. At most
  `max_points` refinements per process. A point is also held to what the job sustains there:
  the refiner times `SUSTAIN_S` seconds at an allocation in force that was measured before,
  and a point the job runs more than `NOISE_TOLERANCE` below is lowered to what it ran at
  and reported (window after window at a point below the top measured one,
  where more CPU is known to help, since the neighbour that keeps the cores busy may come
  later; once at the top). A one-second window can catch a quiet moment: on the physical
  run loading-light jobs measured full speed at a quarter core, then ran there 10% slower for
  minutes beside heavy jobs that kept both cores busy (49.8 ms a step against 45.2 at their
  half-core share under proportional), slower than the share Synergy promises them.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Collection, Sequence

from synergy.profiler.window import MIN_WINDOW_S, ThroughputWindow

#: Relative gain of the top point over the one below that still counts as climbing (the
#: optimistic search's threshold, search.py).
CLIMB_THRESHOLD = 0.10
#: Refinements one job process makes at most.
MAX_REFINEMENTS = 4
#: Seconds a measured point in force is timed to see that the job sustains it (module docstring).
SUSTAIN_S = 15.0
#: A point less than this much faster than the best at fewer CPUs is measurement noise, not a
#: gain: on a quiet 2-core machine a loading-light job measured 88.9 samples/s at a quarter
#: core and 91.0 at half (2.4% apart), and TUNE gave it half a core it did not need; the demo
#: saw 0.991 against 1.0.
NOISE_TOLERANCE = 0.05


def flatten_noise(points: Sequence[tuple[float, float]],
                  tolerance: float = NOISE_TOLERANCE) -> list[tuple[float, float]]:
    """`points` (CPUs, samples/s) with every point that is not `tolerance` faster than the
    best at fewer CPUs set to that best: the curve never falls as CPUs grow, and a job's best
    case is the fewest CPUs that reach its speed within the noise of a measurement."""
    out: list[tuple[float, float]] = []
    best = 0.0
    for c, t in sorted(points):
        if out and t < best * (1.0 + tolerance):
            t = best
        best = max(best, t)
        out.append((c, t))
    return out


def optimistic_points(points: Sequence[tuple[float, float]], threshold: float = CLIMB_THRESHOLD,
                      saturated: Collection[float] = (), ceiling: float | None = None,
                      ) -> tuple[list[tuple[float, float]], float | None]:
    """`points` (CPUs, samples/s), plus one extrapolated point at twice the top CPUs when the
    top is still climbing; returns (points, the extrapolated CPU count or None). `saturated`:
    the CPU counts at which the job used its whole quota (LiveProfiler.saturated); `ceiling`:
    samples/s no CPU count exceeds (StepCeiling.samples_per_s), None where unknown."""
    pts = sorted(points)
    if len(pts) == 1 and pts[0][0] in saturated and pts[0][0] > 0 and pts[0][1] > 0:
        c1, t1 = pts[0]  # CPU-bound and alone: on the line through the origin
        guess = 2.0 * t1
    elif len(pts) < 2:
        return pts, None
    else:
        (c0, t0), (c1, t1) = pts[-2], pts[-1]
        if not (t1 >= (1.0 + threshold) * t0 and c1 > c0):
            return pts, None
        # On the line through the top two, but never steeper than the line through the origin.
        guess = min(t1 + (t1 - t0) / (c1 - c0) * c1, 2.0 * t1)
    if ceiling is not None:
        guess = min(guess, ceiling)
    if not guess > t1:  # the device time already bounds the top point: nothing above it
        return pts, None
    return [*pts, (2.0 * c1, guess)], 2.0 * c1


class StepCeiling:
    """The speed no CPU allocation exceeds, from how long the training script holds each batch.

    Between handing a batch to the script and being asked for the next, the wrap times the
    script's step (`add`: wall seconds and the CPU seconds its process used meanwhile). Wall
    time the process did not spend on a CPU is device time (a GPU step, an emulated one's
    sleep), which more CPUs do not shorten; a step that is CPU work (a CPU model, a CUDA
    spin-wait) shows none, and then there is no ceiling. The low decile of recent steps is
    taken, so iterations slowed by a neighbour or a throttled quota do not lower the bound.
    """

    #: Steps kept (the most recent).
    KEEP = 256
    #: Steps needed before a ceiling is given.
    MIN_STEPS = 8

    def __init__(self, samples_per_batch: int) -> None:
        self.samples_per_batch = samples_per_batch
        self._device_s: deque[float] = deque(maxlen=self.KEEP)

    def add(self, wall_s: float, cpu_s: float) -> None:
        self._device_s.append(max(0.0, wall_s - cpu_s))

    @property
    def samples_per_s(self) -> float | None:
        if len(self._device_s) < self.MIN_STEPS:
            return None
        low = sorted(self._device_s)[len(self._device_s) // 10]
        return self.samples_per_batch / low if low > 0 else None


class Refiner:
    """Measures the job at each new allocation in force after profiling; see the module docstring."""

    def __init__(self, points: Sequence[tuple[float, float]], samples_per_batch: int,
                 guessed: float | None = None, warmup: int = 3, measure: int = 8,
                 max_points: int = MAX_REFINEMENTS, min_s: float = MIN_WINDOW_S,
                 sustain_s: float = SUSTAIN_S) -> None:
        self.measured = dict(points)
        if guessed is not None:
            self.measured.pop(guessed, None)  # a guess is not a measurement
        self.samples_per_batch = samples_per_batch
        self.warmup, self.measure, self.max_points, self.min_s = warmup, measure, max_points, min_s
        self.sustain_s = sustain_s
        self.refined = 0
        self._cpus = 0.0
        self._window: ThroughputWindow | None = None
        #: The point `_window` holds the job to (None: it measures a new point).
        self._held: float | None = None
        #: Points whose sustained speed was timed.
        self._sustained: set[float] = set()

    @property
    def done(self) -> bool:
        return self.refined >= self.max_points

    def on_batch(self, now_s: float, in_force_cpus: float) -> bool:
        """An iteration ended at `now_s` under `in_force_cpus` (0 = unknown). Returns True when
        a new point was just measured (`points` holds it): the caller reports the profile."""
        if self.done or not in_force_cpus > 0:
            return False
        if not math.isclose(in_force_cpus, self._cpus, abs_tol=1e-9):
            self._cpus = in_force_cpus
            known = next((c for c in self.measured if math.isclose(in_force_cpus, c, abs_tol=1e-9)), None)
            if known is None:
                self._held, self._window = None, ThroughputWindow(self.warmup, self.measure, self.min_s)
            else:
                self._hold(known)
            return False
        if self._window is None:
            return False
        self._window.tick(now_s, self.samples_per_batch)
        if not self._window.done:
            return False
        pace, held = self._window.samples_per_s, self._held
        if held is None:  # a new point; then held to it like any other
            self.measured[self._cpus] = pace
            self._hold(self._cpus)
        else:
            self._sustained.add(held)
            self._hold(held)
            if pace >= self.measured[held] * (1.0 - NOISE_TOLERANCE):
                return False
            self.measured[held] = pace
        self.refined += 1
        return True

    def _hold(self, point: float) -> None:
        """Time `sustain_s` seconds at `point` (see the module docstring): window after window
        below the top measured point, where more CPU is known to help, since a neighbour that
        keeps the cores busy may come later; once at the top."""
        again = point < max(self.measured) or point not in self._sustained
        fresh = again and self.sustain_s > 0
        self._held = point if fresh else None
        self._window = ThroughputWindow(self.warmup, self.measure, self.sustain_s) if fresh else None

    @property
    def points(self) -> list[tuple[float, float]]:
        """Every measured point (CPUs, samples/s), by CPU count."""
        return sorted(self.measured.items())
