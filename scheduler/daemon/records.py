"""What the daemon persists: jobs with their lifecycle history, and nodes.

Records are frozen dataclasses: the logic builds a changed copy with `dataclasses.replace`
and hands it to the store, which commits it before the in-memory view changes. A failed
commit therefore leaves both the database and the memory as they were.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Mapping

from synergy.scheduler.jobspec import JobSpec
# AdminState is the core's (model.py): what an admin set on a node, which the filters read;
# liveness (lost or not) is tracked separately, in live.py.
from synergy.scheduler.model import AdminState, Allocation, Placement, Resources, ServerPool

__all__ = ["AdminState", "JobRecord", "JobSpec", "JobState", "NodeRecord", "Transition"]


class JobState(str, enum.Enum):
    SUBMITTED = "submitted"
    PROFILING = "profiling"
    QUEUED = "queued"
    RUNNING = "running"
    PREEMPTED = "preempted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)

    @property
    def can_hold(self) -> bool:
        """States in which a job may hold a placement: RUNNING, and PROFILING under a
        profiling lease (a real placed task that reconciler, leases and node loss treat alike)."""
        return self in (JobState.RUNNING, JobState.PROFILING)


#: The lifecycle graph (docs/daemon.md). Any other transition is a bug and raises.
ALLOWED: dict[JobState | None, frozenset[JobState]] = {
    None: frozenset({JobState.SUBMITTED}),
    JobState.SUBMITTED: frozenset({JobState.PROFILING, JobState.CANCELLED}),
    # PROFILING -> PROFILING: placed under a profiling lease, or requeued into profiling (its
    # node was lost, it was stopped before its profile was reported); RUNNING: profiled, it
    # runs on where it was profiled (no restart); SUCCEEDED: the job finished its training
    # while it was being profiled.
    JobState.PROFILING: frozenset(
        {JobState.PROFILING, JobState.QUEUED, JobState.RUNNING, JobState.CANCELLED, JobState.FAILED,
         JobState.SUCCEEDED}
    ),
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.PREEMPTED, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}),
    JobState.PREEMPTED: frozenset({JobState.QUEUED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


@dataclass(frozen=True)
class Transition:
    from_state: JobState | None
    to_state: JobState
    reason: str
    at_s: float


@dataclass(frozen=True)
class JobRecord:
    id: int
    spec: JobSpec
    #: Secret handed to the job's processes through the agent; never logged.
    token: str
    submitted_at: float
    state: JobState
    history: tuple[Transition, ...] = ()
    waiting_reason: str = ""
    #: Profile reported by the iterator (per-model JSON form); beats the spec's and the zoo's.
    reported_profile: Mapping[str, Any] | None = None
    #: The reported profile was measured under this job's profiling lease ("profiled"), not
    #: merely reported by the job ("reported").
    profiled: bool = False
    #: Under a profiling lease: the most CPUs a point may ask for (the CPUs placed at launch).
    profile_max_cpus: float = 0.0
    #: Under a profiling lease: points below one CPU may be asked for too (ProfilingLease.sub_core).
    profile_sub_core: bool = False
    profile_source: str = ""
    #: Desired allocation while RUNNING (empty otherwise).
    placements: tuple[Placement, ...] = ()
    #: Packing (Tesserae): the placements run on the very GPUs of this job's (its host's),
    #: two jobs per GPU, with CPUs and memory of their own; 0 = GPUs its own. See `held_on`.
    packed_with: int = 0
    attempt: int = 0
    round_index: int = 0
    #: Set when the job must give its resources back (round, drain, cancel): why.
    stop_reason: str = ""
    stop_requested_at: float = 0.0
    #: The agreed last step of a cooperative stop (0 = not agreed yet).
    stop_at_step: int = 0
    #: Allocation to relaunch with as soon as the current attempt has exited (migration).
    next_placements: tuple[Placement, ...] = ()
    #: `packed_with` of that allocation.
    next_packed_with: int = 0
    #: The round that decided `next_placements` (what a relaunch's history names).
    next_round_index: int = 0
    steps_done: int = 0
    samples_per_s: float = 0.0
    attained_gpu_s: float = 0.0
    preemptions: int = 0
    #: Rounds that moved it while it ran (its GPUs changed: Tesserae's migrations).
    migrations: int = 0
    checkpoint_path: str = ""
    checkpoint_step: int = 0
    #: When the last checkpoint was reported (daemon clock; 0 = none, or reported before this field).
    checkpoint_at: float = 0.0
    #: Why the latest checkpoint write failed ("" = it did not); cleared by the next good one.
    checkpoint_error: str = ""
    exit_code: int = 0
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def reason(self) -> str:
        return self.history[-1].reason if self.history else ""

    @property
    def stopping(self) -> bool:
        return bool(self.stop_reason)

    @property
    def placed(self) -> bool:
        """Holds a placement with live tasks: RUNNING, or PROFILING under a profiling lease."""
        return self.state.can_hold and bool(self.placements)

    def held_on(self, node_id: str) -> Resources:
        """What the job's placements take from a node: a packed job's GPUs are its host's,
        counted once (there), so here only its CPUs and memory. Every sum of what nodes
        have allocated goes through this."""
        return held(self.placements, self.packed_with, node_id)

    @property
    def profiling_lease(self) -> bool:
        return self.state == JobState.PROFILING and bool(self.placements)

    def with_progress(self, steps_done: int, samples_per_s: float, attained_gpu_s: float) -> JobRecord:
        """This record with new progress counters. A copy of the fields rather than
        `dataclasses.replace`, which calls `__init__` with all of them: 1.1 against 8.8 us, and the
        progress flush copies every running job once a minute (issue 17)."""
        new = object.__new__(JobRecord)
        fields = new.__dict__  # frozen: the instance dict is still writable while it is new
        fields.update(self.__dict__)
        fields.update(steps_done=steps_done, samples_per_s=samples_per_s, attained_gpu_s=attained_gpu_s)
        return new

    def to(self, state: JobState, reason: str, now: float, **changes: Any) -> JobRecord:
        """This job after a lifecycle transition (kept in the history with its reason)."""
        if state not in ALLOWED[self.state]:
            raise ValueError(f"job {self.id}: illegal transition {self.state.value} -> {state.value}")
        extra: dict[str, Any] = {}
        if state.terminal:
            extra["finished_at"] = now
        if state != JobState.RUNNING:
            # PROFILING: a placement is given explicitly (in `changes`) by the profiling launch.
            extra.update(placements=(), packed_with=0, stop_reason="", stop_requested_at=0.0, stop_at_step=0)
        if state.terminal:
            extra.update(next_placements=(), next_packed_with=0)
        if state == JobState.RUNNING:  # a new attempt: the exit code shown is its own, not the last one's
            extra["exit_code"] = 0
        extra.update(changes)
        return replace(
            self,
            state=state,
            history=self.history + (Transition(self.state, state, reason, now),),
            **extra,
        )


@dataclass(frozen=True)
class NodeRecord:
    """A node as registered by its agent (GPU details are display-only)."""

    id: str
    hostname: str
    capacity: Resources
    reserved: Resources
    admin_state: AdminState = AdminState.READY
    admin_reason: str = ""
    gpus: tuple[Mapping[str, Any], ...] = ()
    agent_version: str = ""
    registered_at: float = 0.0
    #: The agent process that registered the node ("" = a legacy agent): another instance
    #: is refused while this one is alive. Persisted, so a daemon restart keeps it.
    instance_id: str = ""
    #: The agent's cgroup mode ("v1", "v2", "none"; "" = not reported by an old agent) and
    #: whether it enforces memory limits ("memory not enforced" in `synergy nodes`).
    cgroup_mode: str = ""
    memory_enforced: bool = False
    #: Lyra's capacity loaning (`synergy nodes loan / reclaim`): set by the admin, persisted.
    pool: ServerPool = ServerPool.TRAINING
    #: When a reclaimed node's jobs must be gone (daemon clock); 0 = no reclaim under way.
    reclaim_deadline: float = 0.0
    #: The GPU model its agent reports ("V100", "T4"; "" = untyped): `Server.gpu_type`.
    #: Stored in the node's JSON body, so older bodies read back as untyped.
    gpu_type: str = ""

    @property
    def memory_unenforced(self) -> bool:
        return bool(self.cgroup_mode) and not self.memory_enforced

    @property
    def allocatable(self) -> Resources:
        return self.capacity - self.reserved


# -- JSON codecs for the SQLite store ---------------------------------------------------------


def job_to_dict(job: JobRecord) -> dict[str, Any]:
    d = asdict(job)
    d["state"] = job.state.value
    d["spec"]["env"] = [list(kv) for kv in job.spec.env]
    d["spec"]["profile"] = dict(job.spec.profile) if job.spec.profile is not None else None
    d["history"] = [
        {
            "from": t.from_state.value if t.from_state else None,
            "to": t.to_state.value,
            "reason": t.reason,
            "at": t.at_s,
        }
        for t in job.history
    ]
    return d


def job_from_dict(d: Mapping[str, Any]) -> JobRecord:
    spec = dict(d["spec"])
    spec["command"] = tuple(spec["command"])
    spec["env"] = tuple((k, v) for k, v in spec["env"])
    spec["gpu_types"] = tuple(spec.get("gpu_types", ()))
    history = tuple(
        Transition(JobState(t["from"]) if t["from"] else None, JobState(t["to"]), t["reason"], t["at"])
        for t in d["history"]
    )
    fields = dict(d)
    fields.update(
        spec=JobSpec(**spec),
        state=JobState(d["state"]),
        history=history,
        placements=_placements(d["placements"]),
        next_placements=_placements(d["next_placements"]),
    )
    return JobRecord(**fields)


def _placements(items: Any) -> tuple[Placement, ...]:
    return tuple(Placement(p["server_id"], int(p["gpus"]), float(p["cpus"]), float(p["mem_gb"])) for p in items)


def node_to_dict(node: NodeRecord) -> dict[str, Any]:
    d = asdict(node)
    d["admin_state"] = node.admin_state.value
    d["pool"] = node.pool.value
    d["gpus"] = [dict(g) for g in node.gpus]
    return d


def node_from_dict(d: Mapping[str, Any]) -> NodeRecord:
    fields = dict(d)
    fields.update(
        capacity=Resources(**d["capacity"]),
        reserved=Resources(**d["reserved"]),
        admin_state=AdminState(d["admin_state"]),
        pool=ServerPool(d.get("pool", ServerPool.TRAINING.value)),
        gpus=tuple(d["gpus"]),
    )
    return NodeRecord(**fields)


def held(placements: Iterable[Placement], packed_with: int, node_id: str) -> Resources:
    """What `placements` take from node `node_id`, their GPUs not counted when they are
    packed onto another job's (`packed_with` != 0; see JobRecord.held_on). The rule is the
    core's, `Allocation.held`; this sums it for one node."""
    alloc = Allocation(0, tuple(placements), packed_with=packed_with or None)
    return sum((r for sid, r in alloc.held if sid == node_id), Resources())


def placed_on(job: JobRecord, rank: int, node_id: str) -> bool:
    """Whether rank `rank` of the job's current attempt is placed on `node_id`: the only
    node whose reports about that rank count (another node's report could end or stall it)."""
    return 0 <= rank < len(job.placements) and job.placements[rank].server_id == node_id
