"""CODA's contention eliminator, agent side: decide when to throttle a CPU-only task and when to restore it.

CODA (§IV-C, §V-D of the paper) observes that DNN training slows down when CPU jobs on its
node saturate memory bandwidth. When the node's bandwidth passes a threshold (75 % of the
calibrated peak by default) *and* a training task's throughput falls more than a threshold
below its baseline, the eliminator throttles the CPU-only task with the highest bandwidth
(MBA where resctrl offers it, else half its CPU quota); when the contention is gone it
restores step by step.

This module is the pure decision (`decide`: observation + state -> new state + actions,
no I/O, no clock; unit-tested exhaustively). Hysteresis: a throttle needs the bandwidth at
or above `bw_threshold` and a training task degraded on `slow_samples` consecutive
observations (one noisy second is not a slowdown); a restore step needs the bandwidth below
`restore_below` (lower) for `calm_samples` consecutive observations with no training task
degraded; between the two, nothing changes. After any action the next `cooldown_samples`
observations take none, so the effect of one step is measured before the next. Only a
CPU-only task with a measured bandwidth of at least `min_task_share` of the peak is ever
throttled: a task whose first sample has no rate yet (0 B/s) is not "the heaviest".

Training throughput comes through `Throughput`: the training job's own lease reports (the
daemon relays them, with its own baseline, the best under the current allocation, on every
heartbeat reply), or, where none arrive, the GPU utilisation of its GPUs. The baseline the
decision uses is learnt here: the median of the task's last `BASELINE_WINDOW` values taken
while the node was uncontended (`uncontended`: nothing but training uses bandwidth beyond
the restore level, and nothing is held). A best-ever baseline is beaten by noise, so a
training task would always look a few per cent slow; the daemon's figure serves only until
`BASELINE_MIN` such values exist.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Hashable

#: uncontended values a learnt baseline is the median of (the most recent ones)
BASELINE_WINDOW = 30
#: uncontended values needed before the learnt baseline replaces the daemon's
BASELINE_MIN = 5


@dataclass(frozen=True)
class Policy:
    #: node bandwidth / peak at which contention is possible (CODA: 75 %)
    bw_threshold: float = 0.75
    #: a training task is degraded below (1 - this) x its baseline throughput
    throughput_drop: float = 0.10
    #: restore only while node bandwidth / peak stays below this (hysteresis band below bw_threshold)
    restore_below: float = 0.60
    #: consecutive calm observations before each restore step
    calm_samples: int = 3
    #: observations without action after each action
    cooldown_samples: int = 2
    #: at most this many halvings of one task
    max_level: int = 3
    #: consecutive observations with a training task degraded before a throttle
    slow_samples: int = 2
    #: a CPU-only task below this share of the peak bandwidth is never throttled (nothing measured yet, or idle)
    min_task_share: float = 0.05


@dataclass(frozen=True)
class Observation:
    """One telemetry sample, reduced to what the decision needs."""

    node_bw: float
    peak_bw: float
    #: CPU-only task -> its memory bandwidth (bytes/s)
    cpu_tasks: dict[str, float]
    #: training task -> (current throughput, baseline); a baseline <= 0 means "not known yet"
    training: dict[str, tuple[float, float]]


@dataclass(frozen=True)
class Action:
    kind: str  # "throttle" | "restore"
    task: str
    level: int  # the level after the action: quota (or MBA share) = 1 / 2**level of the task's own
    reason: str


@dataclass(frozen=True)
class State:
    #: CPU-only task -> throttle level (absent = 0)
    levels: dict[str, int] = field(default_factory=dict)
    calm: int = 0
    cooldown: int = 0
    #: consecutive observations (cooldown included) with a training task degraded
    slow: int = 0


def degraded(training: dict[str, tuple[float, float]], drop: float) -> list[str]:
    """Training tasks whose throughput is more than `drop` below a known baseline."""
    return sorted(k for k, (now, base) in training.items() if base > 0 and now < (1 - drop) * base)


def uncontended(others_bw: float, peak_bw: float, throttled: bool, policy: Policy = Policy()) -> bool:
    """Whether a training baseline may be learnt now: the bandwidth of everything but the training
    tasks (CPU-only tasks, processes outside the agent) is below `restore_below` of the peak and
    no task is held (a held contender is contention the eliminator is hiding, not its absence)."""
    return peak_bw > 0 and not throttled and others_bw < policy.restore_below * peak_bw


def decide(state: State, obs: Observation, policy: Policy = Policy()) -> tuple[State, list[Action]]:
    levels = {k: v for k, v in state.levels.items() if k in obs.cpu_tasks and v > 0}  # gone tasks drop out
    if obs.peak_bw <= 0:
        return State(levels), []
    share = obs.node_bw / obs.peak_bw
    slow = degraded(obs.training, policy.throughput_drop)
    streak = state.slow + 1 if slow else 0
    if state.cooldown > 0:  # the step's effect is being measured: a slow streak counts on
        return State(levels, 0, state.cooldown - 1, streak), []
    if share >= policy.bw_threshold and slow:
        floor = max(policy.min_task_share * obs.peak_bw, 0.0)
        candidates = [k for k, bw in obs.cpu_tasks.items()
                      if levels.get(k, 0) < policy.max_level and bw > 0 and bw >= floor]
        if streak < policy.slow_samples or not candidates:
            return State(levels, 0, 0, streak), []
        task = max(candidates, key=lambda k: (obs.cpu_tasks[k], k))
        level = levels.get(task, 0) + 1
        levels[task] = level
        why = (f"node bandwidth {share:.0%} of peak >= {policy.bw_threshold:.0%} and training "
               f"{', '.join(slow)} below {1 - policy.throughput_drop:.0%} of baseline for {streak} samples; "
               f"{task} uses the most ({obs.cpu_tasks[task] / 1e9:.2f} GB/s)")
        return State(levels, 0, policy.cooldown_samples), [Action("throttle", task, level, why)]
    if not levels:
        return State(levels, 0, 0, streak), []
    if share < policy.restore_below and not slow:
        calm = state.calm + 1
        if calm < policy.calm_samples:
            return State(levels, calm), []
        task = max(levels, key=lambda k: (levels[k], k))  # the most throttled first, one step
        level = levels[task] - 1
        if level:
            levels[task] = level
        else:
            del levels[task]
        why = (f"node bandwidth {share:.0%} of peak < {policy.restore_below:.0%} and no training task degraded "
               f"for {calm} samples")
        return State(levels, 0, policy.cooldown_samples), [Action("restore", task, level, why)]
    return State(levels, 0, 0, streak), []  # in the hysteresis band, or training still slow: hold


@dataclass
class Throughput:
    """Training throughput per task (the job's own reports, else GPU utilisation) and its baseline.

    The daemon relays each training job's lease reports on heartbeat replies
    (`HeartbeatResponse.progress`: samples/s now and its best under the current allocation);
    `progress()` takes them. `observe()` is called once per telemetry sample: it records the
    value of every task while the node is uncontended and returns (now, baseline), the
    baseline being the median of the last `BASELINE_WINDOW` uncontended values once there are
    `BASELINE_MIN` of them, the daemon's until then (GPU utilisation: from the first value).
    A task's window starts afresh when its allocation (`allocs`) or the kind of value changes.
    """

    reported: dict[str, float] = field(default_factory=dict)
    #: the daemon's baseline per reported task (0 = not known yet)
    baselines: dict[str, float] = field(default_factory=dict)
    #: task -> (allocation, reported?, the last uncontended values)
    _windows: dict[str, tuple[Hashable, bool, deque[float]]] = field(default_factory=dict)

    def report(self, task: str, value: float, baseline: float = 0.0) -> None:
        """One training task's own throughput (samples/s) and, when known, the daemon's baseline."""
        self.reported[task] = value
        if baseline > 0:
            self.baselines[task] = baseline
        else:
            self.baselines.pop(task, None)

    def progress(self, entries: dict[str, tuple[float, float]]) -> None:
        """The daemon's latest view, replacing the previous one (a task missing from it stopped reporting)."""
        for gone in set(self.reported) - set(entries):
            self.reported.pop(gone, None)
            self.baselines.pop(gone, None)
        for task, (value, baseline) in entries.items():
            self.report(task, value, baseline)

    def learnt(self, task: str) -> tuple[float, int]:
        """(median of the uncontended window, its length); (0, 0) when nothing is learnt."""
        w = self._windows.get(task)
        return (statistics.median(w[2]), len(w[2])) if w and w[2] else (0.0, 0)

    def observe(self, gpu_util: dict[str, float], uncontended: bool,
                allocs: dict[str, Hashable] | None = None) -> dict[str, tuple[float, float]]:
        """(current, baseline) per training task; baselines learn only while the node is uncontended."""
        out: dict[str, tuple[float, float]] = {}
        for task, util in gpu_util.items():
            reported = task in self.reported
            now = self.reported[task] if reported else util
            alloc = (allocs or {}).get(task)
            w = self._windows.get(task)
            if w is None or w[0] != alloc or w[1] != reported:
                w = self._windows[task] = (alloc, reported, deque(maxlen=BASELINE_WINDOW))
            if uncontended and now > 0:
                w[2].append(now)
            median, n = self.learnt(task)
            daemon = self.baselines.get(task, 0.0) if reported else 0.0
            base = median if n >= BASELINE_MIN or (n and daemon <= 0) else daemon
            out[task] = (now, base)
        for gone in set(self._windows) - set(gpu_util):
            del self._windows[gone]
        for gone in set(self.reported) - set(gpu_util):
            self.reported.pop(gone, None)
            self.baselines.pop(gone, None)
        return out
