"""Telemetry and throttle state as the daemon's messages (`ResourceUsage`, `NodeTelemetry`, `TaskThrottle`).

One conversion for every heartbeat, so the figures `synergy nodes` / `synergy describe` show
are the very ones the agent's `/metrics` serves. The daemon checks them with
`synergy.scheduler.daemon.validation.measurements`: every number finite and >= 0, and a
bandwidth figure only with a source it knows ("resctrl" or "estimate"). An unmeasured
figure (no PSI, no bandwidth source) is left unset, never sent as zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from synergy.agent.bandwidth import SOURCE_ESTIMATE, SOURCE_MBM, Bandwidth
from synergy.agent.task import Phase, Task
from synergy.agent.telemetry import NodeSample, Pressure, TaskSample
from synergy.v1 import common_pb2, node_pb2

#: the agent's bandwidth sources -> the protocol's words (the copy-benchmark peak is an estimate too)
_WIRE_SOURCE = {SOURCE_MBM: "resctrl", SOURCE_ESTIMATE: "estimate", "copy-benchmark": "estimate"}
_PRESSURE_FIELDS = {"cpu": "cpu_pressure", "memory": "memory_pressure", "io": "io_pressure"}


@dataclass(frozen=True)
class Hold:
    """What the contention eliminator did to one task, for describe (`TaskThrottle`)."""

    level: int
    action: str
    since_unix: float
    reason: str

    def to_msg(self) -> common_pb2.TaskThrottle:
        return common_pb2.TaskThrottle(level=self.level, action=self.action, since_unix_s=self.since_unix,
                                       reason=self.reason[:1000])


def _num(x: float) -> float:
    return x if math.isfinite(x) and x > 0 else 0.0


def pct(x: float) -> float:
    """A percentage within [0, 100]: a ratio of two counter deltas can land a rounding error past 100
    (100.00000000009), which the daemon rightly refuses."""
    return min(100.0, _num(x))


def bandwidth_msg(bw: Bandwidth) -> common_pb2.MemoryBandwidth | None:
    """None where the figure has no source the daemon knows (nothing measured)."""
    source = _WIRE_SOURCE.get(bw.source)
    return common_pb2.MemoryBandwidth(gb_per_s=_num(bw.gb_per_s), source=source) if source else None


def _pressure(usage: common_pb2.ResourceUsage, pressure: dict[str, Pressure]) -> None:
    for resource, p in pressure.items():
        name = _PRESSURE_FIELDS.get(resource)
        if name is not None:
            getattr(usage, name).CopyFrom(common_pb2.Pressure(some_avg10=pct(p.some_avg10),
                                                              full_avg10=pct(p.full_avg10)))


def task_usage(s: TaskSample) -> common_pb2.ResourceUsage:
    u = common_pb2.ResourceUsage(
        cpu_cores=_num(s.cpu_cores),
        rss_bytes=max(0, s.rss_bytes),
        page_faults=max(0, s.page_faults),
        io_read_bytes=max(0, s.read_bytes),
        io_write_bytes=max(0, s.write_bytes),
        gpu_util_pct=pct(s.gpu_util_pct),
        gpu_memory_used_gb=_num(s.gpu_memory_used_gb),
    )
    _pressure(u, s.pressure)
    bw = bandwidth_msg(s.membw)
    if bw is not None:
        u.mem_bandwidth.CopyFrom(bw)
    return u


def node_usage(s: NodeSample) -> common_pb2.ResourceUsage:
    """The node's whole usage: its busy cores, memory in use, PSI and bandwidth."""
    u = common_pb2.ResourceUsage(cpu_cores=_num(s.cpu_cores_busy), rss_bytes=max(0, s.mem_used_bytes))
    _pressure(u, s.pressure)
    bw = bandwidth_msg(s.membw)
    if bw is not None:
        u.mem_bandwidth.CopyFrom(bw)
    return u


def node_telemetry_extras(t: common_pb2.NodeTelemetry, s: NodeSample) -> None:
    """Fill `usage` and `peak_mem_bandwidth` of a NodeTelemetry from a sample."""
    t.usage.CopyFrom(node_usage(s))
    if s.membw_peak.bytes_per_s > 0:
        peak = bandwidth_msg(s.membw_peak)
        if peak is not None:
            t.peak_mem_bandwidth.CopyFrom(peak)


_PHASES = {
    Phase.STARTING: node_pb2.TASK_STATE_STARTING,
    Phase.RUNNING: node_pb2.TASK_STATE_RUNNING,
    Phase.STOPPING: node_pb2.TASK_STATE_STOPPING,
    Phase.EXITED: node_pb2.TASK_STATE_EXITED,
}


def task_status(task: Task, node_id: str, latest: NodeSample | None = None,
                hold: Hold | None = None) -> node_pb2.TaskStatus:
    """The task as the daemon sees it, with its latest usage sample and throttle (when any)."""
    k = task.key
    msg = node_pb2.TaskStatus(
        ref=node_pb2.TaskRef(job_id=k.job_id, attempt=k.attempt, rank=k.rank),
        state=_PHASES[task.phase],
        exit_code=task.exit_code,
        pid=task.pid,
        gpu_indices=list(task.gpu_indices),
        message=task.message,
        placement=common_pb2.Placement(
            node_id=node_id, gpus=task.share.gpus, cpus=task.share.cpus, mem_gb=task.share.mem_gb
        ),
        oom_killed=task.oom_killed,
        cores=sorted(task.grant.cores) if task.alive else [],
        starting_up=task.startup is not None and task.alive,
    )
    sample = latest.tasks.get(str(k)) if latest is not None and task.alive else None
    if sample is not None:
        msg.usage.CopyFrom(task_usage(sample))
    if hold is not None and task.alive:
        msg.throttle.CopyFrom(hold.to_msg())
    return msg


def statuses(tasks: Iterable[Task], node_id: str, latest: NodeSample | None = None,
             holds: Mapping[str, Hold] | None = None) -> list[node_pb2.TaskStatus]:
    holds = holds or {}
    return [task_status(t, node_id, latest, holds.get(str(t.key))) for t in tasks]
