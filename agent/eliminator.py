"""The contention eliminator on the node: telemetry in, `contention.decide` in the middle, actuators out.

Actuators, best first: resctrl MBA (a control group per task whose `schemata` caps its
memory bandwidth at 100 / 2**level percent) where `/sys/fs/resctrl` offers an `MB:` line;
else the task's cgroup CPU quota halved per level (its cores stay; CODA's "reduce the
cores by half" without handing cores to other tasks mid-flight). Which tasks are which:
a task with no GPUs is a CPU-only job, a task with GPUs a training job (the job kind is
not on the wire yet). Every action is logged (`contention.throttle` / `contention.restore`),
counted on `/metrics`, and kept in `recent` for describe once the protocol carries it.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import replace

from synergy.agent.bandwidth import Resctrl
from synergy.agent.contention import Action, Observation, Policy, State, Throughput, decide
from synergy.agent.tasks import Phase, Supervisor, Task
from synergy.agent.telemetry import NodeSample
from synergy.scheduler.daemon.logs import event

RECENT = 50


class Eliminator:
    def __init__(self, supervisor: Supervisor, log: logging.Logger, policy: Policy = Policy(),
                 resctrl: Resctrl | None = None) -> None:
        self.supervisor = supervisor
        self.log = log
        self.policy = policy
        self.mba = resctrl if resctrl is not None and resctrl.mba_domains() else None
        self.state = State()
        self.throughput = Throughput()
        self.counts = {"throttle": 0, "restore": 0}
        self.recent: deque[Action] = deque(maxlen=RECENT)

    @property
    def actuator(self) -> str:
        return "mba" if self.mba is not None else "quota"

    def step(self, sample: NodeSample) -> list[Action]:
        """Decide on one sample and carry the actions out."""
        tasks = {str(t.key): t for t in self.supervisor.tasks.values() if t.phase == Phase.RUNNING}
        seen = {k: t for k, t in tasks.items() if k in sample.tasks}
        cpu = {k: sample.tasks[k].membw.bytes_per_s for k, t in seen.items() if t.share.gpus == 0}
        gpu_util = {k: sample.tasks[k].gpu_util_pct for k, t in seen.items() if t.share.gpus > 0}
        peak = sample.membw_peak.bytes_per_s
        uncontended = peak > 0 and sample.membw.bytes_per_s < self.policy.bw_threshold * peak
        training = self.throughput.observe(gpu_util, uncontended)
        levels = {k: t.throttle_level for k, t in seen.items() if k in cpu and t.throttle_level}
        self.state, actions = decide(replace(self.state, levels=levels),
                                     Observation(sample.membw.bytes_per_s, peak, cpu, training), self.policy)
        for a in actions:
            self._apply(tasks[a.task], a)
        return actions

    def _apply(self, task: Task, a: Action) -> None:
        via = self.actuator
        if self.mba is not None:
            pids = self.supervisor.cgroups.pids(task.cgroup) or [task.pid]
            if not self.mba.set_mba(task.cgroup, pids, 100 // 2**a.level):
                via = "quota"
        done = self.supervisor.set_throttle(task.key, a.level, via)
        self.counts[a.kind] += 1
        self.recent.append(a)
        event(self.log, f"contention.{a.kind}", level=logging.WARNING if a.kind == "throttle" else logging.INFO,
              task=a.task, level_now=a.level, via=via, applied=done, reason=a.reason)
