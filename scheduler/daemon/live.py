"""Observed state that is not persisted: lease renewals, heartbeats, what agents run.

All of it is rebuilt within one heartbeat / renewal interval after a restart (agents report
every task on every heartbeat; job processes keep renewing), which is why none of it needs
a disk write on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from synergy.common.values import value
from synergy.scheduler.model import Placement
from synergy.scheduler.tasks import TaskKey, TaskPhase


@value
class ObservedTask:
    """A task as its node last reported it: built for every task of every heartbeat."""

    key: TaskKey
    phase: TaskPhase
    exit_code: int = 0
    pid: int = 0
    gpu_indices: tuple[int, ...] = ()
    message: str = ""
    placement: Placement | None = None
    #: Exited because the kernel killed it at its memory limit (reported as a kind, not text).
    oom_killed: bool = False
    #: The cores (node-local ids) of the task's cpuset as the agent reports them.
    cores: tuple[int, ...] = ()
    #: In its start-up phase: its job has not reached its training loop (TaskStatus.starting_up).
    starting_up: bool = False
    #: Latest usage sample (ResourceUsage in dict form; empty = none yet). Live only.
    usage: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    #: The agent's contention eliminator throttles it (TaskThrottle in dict form; empty = not). Live only.
    throttle: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    #: The backend's own job for this task ("slurm 1234"; "" = synergy-agent's process). Live only.
    backend_job: str = field(default="", hash=False, compare=False)


#: Value objects (synergy.common.values): never assigned after they are built.
VALUE_TYPES: tuple[type, ...] = (ObservedTask,)

#: Steps a checkpoint may be past the pace a job reported (ReportCheckpoint's plausibility check).
CHECKPOINT_SLACK_STEPS = 1000


@dataclass
class RankLease:
    """What the daemon last heard from one rank of the current attempt."""

    last_renewal: float
    step: int = 0
    samples_per_s: float = 0.0
    steps_per_s: float = 0.0


@dataclass
class JobLive:
    """Runtime view of a RUNNING job's current attempt."""

    attempt: int
    #: When the attempt was launched (or when the daemon started, after a restart).
    since: float
    ranks: dict[int, RankLease] = field(default_factory=dict)
    #: Exit codes of ranks of this attempt that have exited.
    exited: dict[int, int] = field(default_factory=dict)
    #: Up to when attained GPU-seconds have been counted.
    accrued_to: float = 0.0
    #: Ranks of this attempt a LAUNCH instruction went out for.
    launched: set[int] = field(default_factory=set)
    #: The launch waited for room on a node (logged once per attempt, not per heartbeat).
    launch_deferred: bool = False
    #: Periodic checkpoints (periodic.py): the agreed step of the pending one (0 = none), and
    #: when the current interval started (0 = at `since`).
    checkpoint_at: int = 0
    checkpoint_base: float = 0.0

    def unfinished_ranks(self) -> set[int]:
        """Launched ranks that have not been seen exiting (they may not be observed yet)."""
        return {r for r in self.launched if r not in self.exited}

    @property
    def step(self) -> int:
        return max((r.step for r in self.ranks.values()), default=0)

    @property
    def samples_per_s(self) -> float:
        return sum(r.samples_per_s for r in self.ranks.values())

    @property
    def steps_per_s(self) -> float:
        return max((r.steps_per_s for r in self.ranks.values()), default=0.0)

    def step_limit(self, now: float, known: int) -> int | None:
        """The highest step a rank can plausibly have reached by `now` (None: no rate reported
        yet, so nothing to judge by): the furthest step renewed (or `known`, e.g. a stop step
        the daemon set) plus twice the reported pace since that renewal, plus CHECKPOINT_SLACK_STEPS."""
        ranks = [r for r in self.ranks.values() if r.steps_per_s > 0]
        if not ranks:
            return None
        ahead = max(r.step + r.steps_per_s * 2 * max(0.0, now - r.last_renewal) for r in ranks)
        return int(max(ahead, known)) + CHECKPOINT_SLACK_STEPS


@dataclass
class NodeLive:
    last_heartbeat: float
    lost: bool = False
    telemetry: dict[str, Any] = field(default_factory=dict)
    tasks: dict[TaskKey, ObservedTask] = field(default_factory=dict)
    #: Why the agent says the node must take no new tasks now ("" = it can), e.g. a full
    #: work dir: the node is then treated as cordoned, with this reason, until it clears.
    not_ready: str = ""


@dataclass
class LiveState:
    jobs: dict[int, JobLive] = field(default_factory=dict)
    nodes: dict[str, NodeLive] = field(default_factory=dict)
    #: Job id -> its MinIO cache counters from the latest renewal that carried them.
    cache: dict[int, dict[str, int]] = field(default_factory=dict)

    def job(self, job_id: int, attempt: int, now: float) -> JobLive:
        """The live view of `attempt`, starting a fresh one when the attempt changed."""
        live = self.jobs.get(job_id)
        if live is None:  # setdefault: two ranks renewing at once (without the lock) share one entry
            live = self.jobs.setdefault(job_id, JobLive(attempt=attempt, since=now, accrued_to=now))
        if live.attempt != attempt:
            live = JobLive(attempt=attempt, since=now, accrued_to=now)
            self.jobs[job_id] = live
        return live

    def starting(self, job_id: int, attempt: int, nodes: Sequence[str]) -> bool:
        """Whether a rank of `attempt` (rank r on `nodes[r]`) has not reached its training loop:
        its agent reports the task in its start-up phase (`starting_up`) or not started yet, or
        has not reported it since it was placed (the launch is on its way, or deferred). A node not heard from since
        the daemon started says nothing, so a restart does not make every job look new."""
        for rank, node_id in enumerate(nodes):
            node = self.nodes.get(node_id)
            if node is None:
                continue
            task = node.tasks.get(TaskKey(job_id, attempt, rank))
            if task is None or task.starting_up or task.phase == TaskPhase.STARTING:
                return True
        return False

    def tasks_of(self, job_id: int, attempt: int) -> list[tuple[str, ObservedTask]]:
        """(node id, task) for every observed, not yet exited task of one attempt."""
        return [
            (node_id, t)
            for node_id, n in self.nodes.items()
            for t in n.tasks.values()
            if t.key.job_id == job_id and t.key.attempt == attempt and t.phase != TaskPhase.EXITED
        ]
