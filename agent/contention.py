"""CODA's contention eliminator, agent side: decide when to throttle a CPU-only task and when to restore it.

CODA (§IV-C, §V-D of the paper) observes that DNN training slows down when CPU jobs on its
node saturate memory bandwidth. When the node's bandwidth passes a threshold (75 % of the
calibrated peak by default) *and* a training task's throughput falls more than a threshold
below its baseline, the eliminator throttles the CPU-only task with the highest bandwidth
(MBA where resctrl offers it, else half its CPU quota); when the contention is gone it
restores step by step.

This module is the pure decision (`decide`: observation + state -> new state + actions,
no I/O, no clock; unit-tested exhaustively). Hysteresis: a throttle needs the bandwidth at
or above `bw_threshold`; a restore step needs it below `restore_below` (lower) for
`calm_samples` consecutive observations with no training task degraded; between the two,
nothing changes. After any action the next `cooldown_samples` observations take none, so
the effect of one step is measured before the next.

Training throughput comes through `Throughput`: the training job's own lease reports, which
the daemon relays with a baseline (its best under the current allocation) on every heartbeat
reply, or, where none arrive, the GPU utilisation of its GPUs, with the mean of the values
seen while the node was below the bandwidth threshold as the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


def degraded(training: dict[str, tuple[float, float]], drop: float) -> list[str]:
    """Training tasks whose throughput is more than `drop` below a known baseline."""
    return sorted(k for k, (now, base) in training.items() if base > 0 and now < (1 - drop) * base)


def decide(state: State, obs: Observation, policy: Policy = Policy()) -> tuple[State, list[Action]]:
    levels = {k: v for k, v in state.levels.items() if k in obs.cpu_tasks and v > 0}  # gone tasks drop out
    if obs.peak_bw <= 0:
        return State(levels), []
    share = obs.node_bw / obs.peak_bw
    slow = degraded(obs.training, policy.throughput_drop)
    if state.cooldown > 0:
        return State(levels, 0, state.cooldown - 1), []
    if share >= policy.bw_threshold and slow:
        candidates = [k for k in obs.cpu_tasks if levels.get(k, 0) < policy.max_level]
        if not candidates:
            return State(levels), []
        task = max(candidates, key=lambda k: (obs.cpu_tasks[k], k))
        level = levels.get(task, 0) + 1
        levels[task] = level
        why = (f"node bandwidth {share:.0%} of peak >= {policy.bw_threshold:.0%} and training "
               f"{', '.join(slow)} below {1 - policy.throughput_drop:.0%} of baseline; {task} uses the most "
               f"({obs.cpu_tasks[task] / 1e9:.2f} GB/s)")
        return State(levels, 0, policy.cooldown_samples), [Action("throttle", task, level, why)]
    if not levels:
        return State(levels), []
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
    return State(levels), []  # in the hysteresis band, or training still slow: hold


@dataclass
class Throughput:
    """Training throughput per task: the daemon's progress (preferred) or GPU utilisation, and baselines.

    The daemon relays each training job's lease reports on heartbeat replies
    (`HeartbeatResponse.progress`: samples/s now and the best under the current allocation);
    `progress()` takes them. A task without them falls back to its GPUs' utilisation, with a
    baseline learnt here (the mean while the node is uncontended).
    """

    reported: dict[str, float] = field(default_factory=dict)
    #: the daemon's baseline per reported task (0 = not known yet)
    baselines: dict[str, float] = field(default_factory=dict)
    _sums: dict[str, tuple[float, int]] = field(default_factory=dict)

    def report(self, task: str, value: float, baseline: float = 0.0) -> None:
        """One training task's own throughput (samples/s) and, when known, its baseline."""
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

    def observe(self, gpu_util: dict[str, float], uncontended: bool) -> dict[str, tuple[float, float]]:
        """(current, baseline) per training task; learnt baselines grow only while the node is uncontended."""
        out: dict[str, tuple[float, float]] = {}
        for task, util in gpu_util.items():
            if self.baselines.get(task, 0.0) > 0:
                out[task] = (self.reported[task], self.baselines[task])
                continue
            now = self.reported.get(task, util)
            total, n = self._sums.get(task, (0.0, 0))
            if uncontended and now > 0:
                total, n = total + now, n + 1
                self._sums[task] = (total, n)
            out[task] = (now, total / n if n else 0.0)
        for gone in set(self._sums) - set(gpu_util):
            del self._sums[gone]
        for gone in set(self.reported) - set(gpu_util):
            self.reported.pop(gone, None)
            self.baselines.pop(gone, None)
        return out
