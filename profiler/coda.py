"""CODA's adaptive CPU allocator (CODA, §V-B), the alternative to the optimistic search.

CODA looks for the one CPU count a job should get rather than a curve: "the CPU allocator
first finds a reasonable core number as the start point N_start [...] based on the core number
information of the owner's historical jobs and the category of J. The allocator then
increases or decreases the number of cores allocated to J to check whether more or fewer cores
would result in a higher performance of J." It first evaluates fewer cores and keeps reducing
while that does not hurt; otherwise it tries more cores and keeps increasing while that helps;
it stops when neither direction helps. The paper finds the count "in less than four attempts".

Here:

* **Start point.** With history (the CPU counts this user's earlier jobs of the same task
  ended with), the median of it: CODA takes the largest; the median is robust to one odd job
  and users "tend to submit similar training jobs" either way. Without history, by task
  (`START_BY_TASK`): image 6, speech 4, language 2. CODA's own first guesses (3 CV, 5 NLP, 5
  speech) come from its testbed's models; Synergy's Fig. 2 and our zoo say otherwise: image
  models saturate at 4-16 CPUs per GPU (6 is the top of Table 2b's VM ratios and the middle of
  that range on a log scale), language models at 1 ("as few as 1 CPU core per GPU"; 2 so that
  the first step down checks 1), speech models at 3-5 (4 reaches both in one step).
* **Steps.** CODA steps one core at a time from a start that is usually close. Over 1..24
  CPUs a start far from the answer then costs a dozen probes, so the steps here halve (down)
  and double (up): four probes cover 24x. The price is resolution: the answer is a measured
  count, which can be up to twice the knee (the optimistic search finds the knee to one CPU).
* **Holding and improving.** Down: a smaller count *holds* if it keeps at least
  1 - `TOLERANCE` (95%) of the throughput. Up: a larger count *improves* if it gains more than
  `TOLERANCE` (5%). Measurement noise of a few percent thus neither stops nor starts a step.

Pure and deterministic, with the same protocol as `OptimisticSearch`.
"""
from __future__ import annotations

import statistics
from typing import Sequence

from synergy.profiler.curve import MeasuredCurve
from synergy.scheduler.profiles.format import TASKS

#: First CPU count to try, by task, when the user has no history (see the module docstring).
START_BY_TASK: dict[str, int] = {"image": 6, "speech": 4, "language": 2}
#: Relative throughput change that counts as holding (down) or improving (up).
TOLERANCE = 0.05


class CodaSearch(MeasuredCurve):
    """CODA's allocator: start point, halve while throughput holds, then double while it improves."""

    def __init__(self, max_cpus: int, task: str, history: Sequence[int] = ()) -> None:
        super().__init__(max_cpus)
        if task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
        history = list(history)
        if any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in history):
            raise ValueError(f"history must hold positive integers, got {history!r}")
        self.task = task
        wanted = round(statistics.median(history)) if history else START_BY_TASK[task]
        self.start = min(max(wanted, 1), max_cpus)
        self._current: int | None = None  # the count the search stands on
        self._phase = "down"

    def next_cpus(self) -> int | None:
        """The CPU count to try next, or None when neither direction helps any more."""
        if self._current is None:
            return self.start
        if self._phase == "down":
            below = max(self._current // 2, 1)
            if below < self._current and below not in self._measured:
                return below
            self._phase = "up"
        if self._phase == "up":
            above = min(self._current * 2, self.max_cpus)
            if above > self._current and above not in self._measured:
                return above
            self._phase = "done"
        return None

    def record(self, cpus: int, samples_per_s: float) -> None:
        """Record the throughput measured at `cpus` (normally the count `next_cpus` gave)."""
        self._add(cpus, samples_per_s)
        if self._current is None:
            self._current = cpus
            return
        here = self._measured[self._current]
        if self._phase == "down":
            if cpus < self._current and samples_per_s >= (1.0 - TOLERANCE) * here:
                self._current = cpus
            else:
                self._phase = "up"
        elif self._phase == "up":
            if cpus > self._current and samples_per_s > (1.0 + TOLERANCE) * here:
                self._current = cpus
            else:
                self._phase = "done"

    @property
    def best_cpus(self) -> int | None:
        """The CPU count CODA settles on (None before the first point)."""
        return self._current

