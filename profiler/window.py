"""One profiling point's measurement: samples/s over a short window of real iterations.

§3.1: "empirically evaluating training throughput for a few iterations gives a fair estimate
of the actual job throughput". The first iterations after a CPU change are not typical (the
DataLoader's new workers start, their prefetch queues fill, caches warm), so a window skips
`warmup` iterations and then times `measure` iterations.

The caller calls `tick(now_s, samples)` after every iteration with a clock reading it took
(the clock is injected, so the window is pure and its tests need no time). The iteration that
ends the warm-up only sets the start mark; each of the next `measure` ticks adds its samples.
With ``warmup=0`` the first tick is that mark (an iteration's start time is only known from
the tick before it), so at least one iteration is always spent as the mark. With `min_s` the
window also runs until it covers that many seconds (`MIN_WINDOW_S`).
"""
from __future__ import annotations

import math

#: The least a profiling window measures, in seconds (the live driver's and the refiner's):
#: ten CFS periods. A job at a fraction of a core runs in bursts of its quota per 100 ms
#: period, so a window of a few periods reads the phase of those bursts: on the physical run
#: a loading-light job's 8 iterations took 0.35 s, and the same job read 83.4 and 89.0
#: samples/s at a quarter and half a core in one run, 88.9 and 83.5 in the next.
MIN_WINDOW_S = 1.0


class ThroughputWindow:
    """Samples/s over `measure` iterations after `warmup` iterations; `tick` after each one."""

    def __init__(self, warmup: int, measure: int, min_s: float = 0.0) -> None:
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
        if isinstance(measure, bool) or not isinstance(measure, int) or measure < 1:
            raise ValueError(f"measure must be a positive integer, got {measure!r}")
        if not (isinstance(min_s, (int, float)) and math.isfinite(min_s) and min_s >= 0):
            raise ValueError(f"min_s must be a finite number >= 0, got {min_s!r}")
        self.warmup = warmup
        self.measure = measure
        self.min_s = float(min_s)
        self._ticks = 0
        self._last_s: float | None = None
        self._start_s: float | None = None
        self._measured = 0
        self._samples = 0
        self._elapsed_s = 0.0

    def tick(self, now_s: float, samples: int) -> None:
        """One iteration ended at `now_s` (seconds, any monotonic origin) after `samples` samples.

        Ticks after the window is done are ignored, so the caller may keep ticking.
        """
        if not (isinstance(now_s, (int, float)) and math.isfinite(now_s)):
            raise ValueError(f"now_s must be a finite number, got {now_s!r}")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
            raise ValueError(f"samples must be an integer >= 0, got {samples!r}")
        if self._last_s is not None and now_s < self._last_s:
            raise ValueError(f"now_s went backwards: {now_s} after {self._last_s}")
        if self.done:
            return
        self._ticks += 1
        self._last_s = now_s
        if self._start_s is None:
            if self._ticks >= max(self.warmup, 1):
                self._start_s = now_s
            return
        self._measured += 1
        self._samples += samples
        self._elapsed_s = now_s - self._start_s

    @property
    def started(self) -> bool:
        """Whether the warm-up is over and the start mark set (the timed iterations follow)."""
        return self._start_s is not None

    @property
    def done(self) -> bool:
        """Whether `measure` iterations, covering at least `min_s` seconds, have been timed."""
        return self._measured >= self.measure and self._elapsed_s >= self.min_s

    @property
    def samples_per_s(self) -> float:
        """Samples/s over the iterations timed so far (0.0 before any, or if no time passed)."""
        return self._samples / self._elapsed_s if self._elapsed_s > 0 else 0.0

    @property
    def measured_iterations(self) -> int:
        """Iterations timed so far (warm-up and the start mark excluded)."""
        return self._measured

    @property
    def elapsed_s(self) -> float:
        """Seconds covered by the timed iterations."""
        return self._elapsed_s
