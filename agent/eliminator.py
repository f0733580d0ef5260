"""The contention eliminator on the node: telemetry in, `contention.decide` in the middle, actuators out.

Actuators, best first: resctrl MBA (a control group per task whose `schemata` caps its
memory bandwidth at 100 / 2**level percent) where `/sys/fs/resctrl` offers an `MB:` line;
else the task's cgroup CPU quota halved per level (its cores stay; CODA's "reduce the
cores by half" without handing cores to other tasks mid-flight). Which tasks are which:
a task with GPUs, or one whose job reports throughput (the daemon's `progress` on heartbeat
replies), is a training task; any other is a CPU-only job. Every action is logged
(`contention.throttle` / `contention.restore`), counted on `/metrics`, and the current hold
of each throttled task (`holds`: level, what was done, since when, why) rides on the
heartbeats as `TaskStatus.throttle`, so `synergy describe` shows it.

Training baselines are learnt while the node is uncontended (`contention.uncontended`): the
bandwidth of everything but the training tasks is below the restore level and nothing is
held. "Everything but training" is measured (resctrl: node minus training tasks) or, with the
estimate, the node's busy cores less the training tasks' CPU, times the calibrated per-core
rate: processes outside the agent (another tenant's job) count as contention too.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import replace
from typing import Callable

from synergy.agent.bandwidth import SOURCE_ESTIMATE, Calibration, Resctrl
from synergy.agent.contention import Action, Observation, Policy, State, Throughput, decide, uncontended
from synergy.agent.report import Hold
from synergy.agent.tasks import Phase, Supervisor, Task
from synergy.agent.telemetry import NodeSample
from synergy.common.logs import event

RECENT = 50


class Eliminator:
    def __init__(self, supervisor: Supervisor, log: logging.Logger, policy: Policy = Policy(),
                 resctrl: Resctrl | None = None, wall_clock: Callable[[], float] = time.time,
                 calibration: Calibration | None = None) -> None:
        self.supervisor = supervisor
        self.log = log
        self.policy = policy
        self.mba = resctrl if resctrl is not None and resctrl.mba_domains() else None
        self.state = State()
        self.throughput = Throughput()
        self.counts = {"throttle": 0, "restore": 0}
        self.recent: deque[Action] = deque(maxlen=RECENT)
        #: task key -> its current throttle (absent = not throttled)
        self.holds: dict[str, Hold] = {}
        self.wall_clock = wall_clock
        self.calibration = calibration

    @property
    def actuator(self) -> str:
        return "mba" if self.mba is not None else "quota"

    def step(self, sample: NodeSample) -> list[Action]:
        """Decide on one sample and carry the actions out."""
        tasks = {str(t.key): t for t in self.supervisor.tasks.values() if t.phase == Phase.RUNNING}
        seen = {k: t for k, t in tasks.items() if k in sample.tasks}
        train = {k for k, t in seen.items() if t.share.gpus > 0 or k in self.throughput.reported}
        cpu = {k: sample.tasks[k].membw.bytes_per_s for k in seen if k not in train}
        gpu_util = {k: sample.tasks[k].gpu_util_pct for k in train}
        peak = sample.membw_peak.bytes_per_s
        levels = {k: t.throttle_level for k, t in seen.items() if k in cpu and t.throttle_level}
        quiet = uncontended(self.others_bw(sample, train), peak, bool(levels), self.policy)
        training = self.throughput.observe(gpu_util, quiet, {k: seen[k].share for k in train})
        self.state, actions = decide(replace(self.state, levels=levels),
                                     Observation(sample.membw.bytes_per_s, peak, cpu, training), self.policy)
        for a in actions:
            self._apply(tasks[a.task], a)
        self._sync_holds(tasks)
        return actions

    def others_bw(self, sample: NodeSample, train: set[str]) -> float:
        """Bandwidth of everything on the node but the training tasks (bytes/s)."""
        if sample.membw.source == SOURCE_ESTIMATE and self.calibration is not None:
            busy = sample.cpu_cores_busy - sum(sample.tasks[k].cpu_cores for k in train if k in sample.tasks)
            return self.calibration.estimate(busy)
        return max(0.0, sample.membw.bytes_per_s - sum(sample.tasks[k].membw.bytes_per_s
                                                         for k in train if k in sample.tasks))

    def _sync_holds(self, running: dict[str, Task]) -> None:
        """Holds follow the tasks' levels (a re-adopted throttled task gets one without a reason)."""
        for key in list(self.holds):
            if key not in running or not running[key].throttle_level:
                del self.holds[key]
        for key, t in running.items():
            if t.throttle_level and key not in self.holds:
                self.holds[key] = Hold(t.throttle_level, self.describe_action(t, t.throttle_level, t.throttle_via),
                                       self.wall_clock(), "throttled before the agent restarted")

    @staticmethod
    def describe_action(task: Task, level: int, via: str) -> str:
        """What a level means for this task, in words for describe."""
        if via == "mba":
            return f"mba {max(10, 100 // 2**level)}%"
        cores = task.share.cpus or len(task.cores)
        return f"cpu quota halved to {cores / 2**level:g} cores" if level == 1 else \
            f"cpu quota 1/{2**level} to {cores / 2**level:g} cores"

    def _apply(self, task: Task, a: Action) -> None:
        via = self.actuator
        if self.mba is not None:
            pids = self.supervisor.cgroups.pids(task.cgroup) or [task.pid]
            if not self.mba.set_mba(task.cgroup, pids, 100 // 2**a.level):
                via = "quota"
        done = self.supervisor.set_throttle(task.key, a.level, via)
        if done and a.level > 0:
            self.holds[a.task] = Hold(a.level, self.describe_action(task, a.level, via), self.wall_clock(), a.reason)
        elif done:
            self.holds.pop(a.task, None)
        self.counts[a.kind] += 1
        self.recent.append(a)
        event(self.log, f"contention.{a.kind}", level=logging.WARNING if a.kind == "throttle" else logging.INFO,
              task=a.task, level_now=a.level, via=via, applied=done, reason=a.reason)
