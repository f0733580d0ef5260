"""Translation between synergy.v1 messages and the daemon's records (no logic here)."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message

from synergy.scheduler.daemon.live import ObservedTask, TaskKey, TaskPhase
from synergy.scheduler.daemon.nodes import NodeView
from synergy.scheduler.daemon.progress import TaskProgress
from synergy.scheduler.daemon.tasklogs import LogChunk, LogRequest
from synergy.scheduler.daemon.reconciler import Instruction, InstructionKind
from synergy.scheduler.daemon.records import JobRecord, JobState, NodeRecord
from synergy.scheduler.daemon.users import unix_user
# The job spec's one wire translation lives with the spec (the CLI uses it too); re-exported
# here so that the servicers find every conversion in one module.
from synergy.scheduler.jobspec.proto import (  # noqa: F401 (re-exported)
    profile_from_msg,
    profile_to_msg,
    spec_from_msg,
    spec_summary_msg,
    spec_to_msg,
)
from synergy.scheduler.model import Placement, Resources
from synergy.v1 import admin_pb2, common_pb2, node_pb2


# -- enums ----------------------------------------------------------------------------------------
def job_state_to_msg(state: JobState | None) -> int:
    if state is None:
        return common_pb2.JOB_STATE_UNSPECIFIED
    return common_pb2.JobState.Value("JOB_STATE_" + state.value.upper())


def job_state_from_msg(value: int) -> JobState | None:
    """None for UNSPECIFIED or an unknown number (a filter on it matches nothing)."""
    name = common_pb2.JobState.Name(value) if value in common_pb2.JobState.values() else ""
    if not name or value == common_pb2.JOB_STATE_UNSPECIFIED:
        return None
    return JobState(name.removeprefix("JOB_STATE_").lower())


def node_state_to_msg(state: str) -> int:
    return common_pb2.NodeState.Value("NODE_STATE_" + state.upper())


_TASK_PHASES = {
    node_pb2.TASK_STATE_STARTING: TaskPhase.STARTING,
    node_pb2.TASK_STATE_RUNNING: TaskPhase.RUNNING,
    node_pb2.TASK_STATE_STOPPING: TaskPhase.STOPPING,
    node_pb2.TASK_STATE_EXITED: TaskPhase.EXITED,
}
_INSTRUCTIONS = {
    InstructionKind.LAUNCH: node_pb2.INSTRUCTION_KIND_LAUNCH,
    InstructionKind.RESIZE: node_pb2.INSTRUCTION_KIND_RESIZE,
    InstructionKind.STOP: node_pb2.INSTRUCTION_KIND_STOP,
}


# -- small types ----------------------------------------------------------------------------------
def resources_to_msg(r: Resources) -> common_pb2.Resources:
    return common_pb2.Resources(gpus=r.gpus, cpus=r.cpus, mem_gb=r.mem_gb)


def resources_from_msg(m: common_pb2.Resources) -> Resources:
    return Resources(m.gpus, m.cpus, m.mem_gb)


def placement_to_msg(p: Placement) -> common_pb2.Placement:
    return common_pb2.Placement(node_id=p.server_id, gpus=p.gpus, cpus=p.cpus, mem_gb=p.mem_gb)


def placement_from_msg(m: common_pb2.Placement, default_node: str, force_node: bool = False) -> Placement:
    node = default_node if force_node or not m.node_id else m.node_id
    return Placement(node, int(m.gpus), m.cpus, m.mem_gb)


# -- jobs -----------------------------------------------------------------------------------------
def job_to_info(
    job: JobRecord, history: bool, lease_expires_at: float = 0.0, full_spec: bool = True
) -> admin_pb2.JobInfo:
    """`history` and `full_spec` are DescribeJob's; list replies carry the spec's summary."""
    info = admin_pb2.JobInfo(
        id=job.id,
        name=job.name,
        spec=spec_to_msg(job.spec) if full_spec else spec_summary_msg(job.spec),
        state=job_state_to_msg(job.state),
        state_reason=job.reason,
        waiting_reason=job.waiting_reason if job.state == JobState.QUEUED else "",
        submitted_at_unix_s=job.submitted_at,
        started_at_unix_s=job.started_at,
        finished_at_unix_s=job.finished_at,
        placements=[placement_to_msg(p) for p in job.placements],
        packed_with_job_id=job.packed_with,
        attempt=job.attempt,
        steps_done=job.steps_done,
        samples_per_s=job.samples_per_s,
        attained_gpu_s=job.attained_gpu_s,
        preemptions=job.preemptions,
        last_checkpoint_path=job.checkpoint_path,
        last_checkpoint_step=job.checkpoint_step,
        last_checkpoint_unix_s=job.checkpoint_at,
        last_checkpoint_error=job.checkpoint_error,
        exit_code=job.exit_code,
        profile_source=job.profile_source,
        lease_expires_at_unix_s=lease_expires_at if job.placed else 0.0,
        stop_at_step=job.stop_at_step,
    )
    if history:
        info.history.extend(
            admin_pb2.JobTransition(
                from_state=job_state_to_msg(t.from_state),
                to_state=job_state_to_msg(t.to_state),
                reason=t.reason,
                at_unix_s=t.at_s,
            )
            for t in job.history
        )
    return info


# -- nodes ----------------------------------------------------------------------------------------
def node_from_register(m: node_pb2.RegisterNodeRequest) -> NodeRecord:
    return NodeRecord(
        id=m.node_id,
        hostname=m.hostname or m.node_id,
        capacity=resources_from_msg(m.capacity),
        reserved=resources_from_msg(m.reserved),
        gpus=tuple(plain(g) for g in m.gpus),
        agent_version=m.agent_version,
        instance_id=m.instance_id,
        cgroup_mode=m.cgroup_mode,
        memory_enforced=m.memory_enforced,
        gpu_type=m.gpu_type,
    )


def task_from_msg(m: node_pb2.TaskStatus, node_id: str) -> ObservedTask | None:
    """None for a task with an unknown state (it is ignored, not guessed at)."""
    phase = _TASK_PHASES.get(m.state)
    if phase is None:
        return None
    ref = m.ref  # each read of a sub-message builds a wrapper
    return ObservedTask(
        key=TaskKey(ref.job_id, ref.attempt, ref.rank),
        phase=phase,
        exit_code=m.exit_code,
        pid=m.pid,
        gpu_indices=tuple(m.gpu_indices),
        message=m.message[:1024],
        # A task runs on the node that reports it, whatever node id its placement names.
        placement=placement_from_msg(m.placement, node_id, force_node=True) if m.HasField("placement") else None,
        oom_killed=m.oom_killed,
        cores=tuple(m.cores),
        starting_up=m.starting_up,
        usage=plain(m.usage) if m.HasField("usage") else {},
        throttle=plain(m.throttle) if m.HasField("throttle") else {},
    )


def telemetry_from_msg(m: common_pb2.NodeTelemetry) -> dict[str, Any]:
    return plain(m)


def plain(m: Message) -> dict[str, Any]:
    """`MessageToDict(m, preserving_proto_field_name=True)`, the same dict, at a fraction of
    its cost for the messages a heartbeat carries (the node's telemetry, every task's usage
    and throttle: json_format's generic walk was a quarter of a heartbeat's CPU).

    A message type made of nested messages and the scalars in `_AS_JSON` is converted here,
    by the JSON mapping's rules (64-bit integers as strings, non-finite numbers as "NaN" or
    "Infinity"); any other (enums, bytes, maps, 32-bit floats, well-known types) goes to
    MessageToDict, so the two never differ (tests/daemon/test_convert_plain.py).
    """
    fields = _plain_fields(m.DESCRIPTOR)
    if fields is None:
        return MessageToDict(m, preserving_proto_field_name=True)
    out: dict[str, Any] = {}
    for fd, value in m.ListFields():
        repeated, each = fields[fd.number]
        out[fd.name] = [each(v) for v in value] if repeated else each(value)
    return out


def _json_double(value: float) -> float | str:
    return value if math.isfinite(value) else _JSON_NON_FINITE[str(value)]


_JSON_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_FD = FieldDescriptor
#: How a scalar of each C++ type appears in JSON (strings and bools as themselves).
_AS_JSON: dict[int, Callable[[Any], Any]] = {
    _FD.CPPTYPE_INT32: int, _FD.CPPTYPE_UINT32: int, _FD.CPPTYPE_BOOL: bool,
    _FD.CPPTYPE_INT64: str, _FD.CPPTYPE_UINT64: str, _FD.CPPTYPE_DOUBLE: _json_double,
}


@functools.cache
def _plain_fields(descriptor: Descriptor) -> dict[int, tuple[bool, Callable[[Any], Any]]] | None:
    """Field number -> (repeated, how one value converts); None when the type is left to
    MessageToDict. A nested message converts by `plain` in turn (its own type decides)."""
    if descriptor.full_name.startswith("google.protobuf."):
        return None  # well-known types have JSON forms of their own
    kinds = {}
    for fd in descriptor.fields:
        if fd.cpp_type == _FD.CPPTYPE_MESSAGE:
            if fd.message_type.GetOptions().map_entry:
                return None
            each: Callable[[Any], Any] = plain
        elif fd.type == _FD.TYPE_STRING:
            each = str
        elif fd.cpp_type in _AS_JSON:
            each = _AS_JSON[fd.cpp_type]
        else:
            return None  # enums, bytes, 32-bit floats
        kinds[fd.number] = (fd.is_repeated, each)
    return kinds


def node_to_info(v: NodeView) -> admin_pb2.NodeInfo:
    n = v.record
    info = admin_pb2.NodeInfo(
        node_id=n.id,
        hostname=n.hostname,
        state=node_state_to_msg(v.state),
        state_reason=v.reason,
        capacity=resources_to_msg(n.capacity),
        reserved=resources_to_msg(n.reserved),
        allocatable=resources_to_msg(n.allocatable),
        allocated=resources_to_msg(v.allocated),
        free=resources_to_msg(n.allocatable - v.allocated),
        gpus=[ParseDict(g, common_pb2.GpuInfo()) for g in n.gpus],
        last_heartbeat_unix_s=v.last_heartbeat,
        registered_at_unix_s=n.registered_at,
        job_ids=list(v.job_ids),
        agent_version=n.agent_version,
        cgroup_mode=n.cgroup_mode,
        memory_enforced=n.memory_enforced,
        throttled_tasks=v.throttled_tasks,
        pool=n.pool.value,
        gpu_type=n.gpu_type,
        backend_jobs=list(v.backend_jobs),
    )
    if v.telemetry:
        info.telemetry.CopyFrom(ParseDict(v.telemetry, common_pb2.NodeTelemetry()))
    return info


def task_to_info(node_id: str, t: ObservedTask) -> admin_pb2.TaskInfo:
    info = admin_pb2.TaskInfo(rank=t.key.rank, node_id=node_id, state=t.phase.value, pid=t.pid,
                              backend_job=t.backend_job)
    if t.usage:
        info.usage.CopyFrom(ParseDict(t.usage, common_pb2.ResourceUsage()))
    if t.throttle:
        info.throttle.CopyFrom(ParseDict(t.throttle, common_pb2.TaskThrottle()))
    return info


def log_chunk_from_msg(m: node_pb2.LogChunk) -> LogChunk:
    return LogChunk(TaskKey(m.ref.job_id, m.ref.attempt, m.ref.rank), m.offset, bytes(m.data), m.eof, m.error)


def log_request_to_msg(r: LogRequest) -> node_pb2.LogRequest:
    return node_pb2.LogRequest(ref=task_ref(r.key), offset=r.offset, max_bytes=r.max_bytes, tail=r.tail)


def progress_to_msg(p: TaskProgress) -> node_pb2.TaskProgress:
    return node_pb2.TaskProgress(ref=task_ref(p.key), throughput=p.throughput, baseline_throughput=p.baseline)


def task_ref(key: TaskKey) -> node_pb2.TaskRef:
    return node_pb2.TaskRef(job_id=key.job_id, attempt=key.attempt, rank=key.rank)


def instruction_to_msg(ins: Instruction) -> node_pb2.Instruction:
    out = node_pb2.Instruction(
        kind=_INSTRUCTIONS[ins.kind], ref=task_ref(ins.key), reason=ins.reason, stop_grace_s=ins.stop_grace_s
    )
    if ins.placement is not None:
        out.placement.CopyFrom(placement_to_msg(ins.placement))
    job = ins.job
    if ins.kind == InstructionKind.LAUNCH and job is not None and ins.placement is not None:
        out.task.CopyFrom(
            node_pb2.TaskSpec(
                ref=task_ref(ins.key),
                job_name=job.name,
                world_size=len(job.placements),
                command=list(job.spec.command),
                working_dir=job.spec.working_dir,
                env=dict(job.spec.env),
                placement=placement_to_msg(ins.placement),
                job_token=job.token,
                checkpoint_dir=job.spec.checkpoint_dir,
                resume_checkpoint_path=job.checkpoint_path,
                resume_step=job.checkpoint_step,
                master_node_id=job.placements[0].server_id,
                master_hostname=ins.master_hostname,
                packed_with_job_id=job.packed_with,
                run_as_user=unix_user(job.spec.user),
            )
        )
    return out
