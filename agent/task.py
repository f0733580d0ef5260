"""What the agent keeps of each task: its share, processes, phase and exit (`Task`), and counts.

Plain records and the small rules about them (the cgroup name of a task and back, the
bounded log tail quoted in exit messages); the `Supervisor` (tasks.py) changes them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from synergy.agent.cores import CoreGrant
from synergy.agent.startup import Line, Startup
from synergy.common.tasks import LAUNCH_FAILED, TaskKey  # noqa: F401 - LAUNCH_FAILED re-exported
from synergy.common.tasks import MAX_JOBS_PER_GPU  # noqa: F401 - the core's packing limit, re-exported
from synergy.common.tasks import TaskPhase as Phase

GIB = 1024**3
#: The exit code that means "checkpointed, restart me" (docs/daemon.md).
EXIT_RESTART = 75
#: Exit code reported for a task whose exit status is unknown (lost across an agent restart).
EXIT_LOST = 255
#: Lines of a failed task's log quoted in its exit message (the daemon keeps 1024 characters).
TAIL_LINES = 10
TAIL_CHARS = 700


@dataclass(frozen=True)
class Share:
    """A task's resources on this node (the wire's Placement)."""

    gpus: int
    cpus: float
    mem_gb: float


@dataclass
class Task:
    key: TaskKey
    name: str
    share: Share
    log_path: Path
    phase: Phase = Phase.STARTING
    grant: CoreGrant = CoreGrant()
    gpu_indices: tuple[int, ...] = ()
    #: the shim, when this agent instance started it (None for a re-adopted task)
    proc: subprocess.Popen[bytes] | None = None
    #: the job's process (leader of its own process group) and the shim that waits for it,
    #: each with its start time (clock ticks since boot) so a reused pid is never mistaken
    pid: int = 0
    pid_ticks: int = 0
    shim_pid: int = 0
    shim_ticks: int = 0
    exit_code: int = 0
    message: str = ""
    #: monotonic time at which a stopping task gets SIGKILL.
    kill_at: float | None = None
    stop_reason: str = ""
    #: exited because the kernel killed it at its memory limit (TaskStatus.oom_killed).
    oom_killed: bool = False
    #: the cgroup still has to be removed (it was busy when the task exited).
    cgroup_pending: bool = False
    started_at: float = field(default_factory=time.time)
    #: why the exit status is unknown (the task is reported lost), "" otherwise
    lost: str = ""
    #: re-adopted from a previous agent instance's state file
    adopted: bool = False
    #: contention eliminator: CPU quota (or MBA share) is 1 / 2**throttle_level of the task's own
    throttle_level: int = 0
    #: how the throttle acts: "quota" (the cgroup CPU quota) or "mba" (resctrl, the quota untouched)
    throttle_via: str = "quota"
    #: packing: the job whose task's GPUs this task shares (0 = GPUs its own)
    packed_with: int = 0
    #: why the last RESIZE could not be applied (logged once, not at every repeat); "" after one held
    resize_failure: str = ""
    #: its start-up phase (agent/startup.py: no CPU quota until its job reaches its training loop);
    #: None once over, or when there is none (no cgroups)
    startup: Startup | None = None
    #: after start-up, the job's line for its last word (agent/startup.py); None once heard or closed
    line: Line | None = None
    #: monotonic time its wind-down ends (no CPU quota while its process exits); None: not winding down
    wind_down_until: float | None = None

    @property
    def cores(self) -> tuple[int, ...]:
        """The task's cpuset (its whole cores and the shared pool)."""
        return self.grant.cores

    @property
    def cgroup(self) -> str:
        return f"job{self.key.job_id}-a{self.key.attempt}-r{self.key.rank}"

    @property
    def alive(self) -> bool:
        return self.phase in (Phase.STARTING, Phase.RUNNING, Phase.STOPPING)

    def to_record(self, kill_at_unix: float | None) -> dict[str, object]:
        """What the state file keeps of the task (never the job token)."""
        g = self.grant
        return {
            "key": [self.key.job_id, self.key.attempt, self.key.rank], "name": self.name,
            "share": [self.share.gpus, self.share.cpus, self.share.mem_gb], "log_path": str(self.log_path),
            "phase": self.phase.value, "exclusive": list(g.exclusive), "shared": list(g.shared), "fraction": g.fraction,
            "gpu_indices": list(self.gpu_indices), "pid": self.pid, "pid_ticks": self.pid_ticks,
            "shim_pid": self.shim_pid, "shim_ticks": self.shim_ticks, "exit_code": self.exit_code,
            "message": self.message, "stop_reason": self.stop_reason, "kill_at_unix": kill_at_unix,
            "started_at": self.started_at, "lost": self.lost, "throttle_level": self.throttle_level,
            "throttle_via": self.throttle_via, "packed_with": self.packed_with, "starting": self.startup is not None,
        }

    @classmethod
    def from_record(cls, r: dict) -> Task:  # type: ignore[type-arg]
        gpus, cpus, mem_gb = r["share"]
        return cls(
            key=TaskKey(*r["key"]), name=r["name"], share=Share(int(gpus), float(cpus), float(mem_gb)),
            log_path=Path(r["log_path"]), phase=Phase(r["phase"]),
            grant=CoreGrant(tuple(r["exclusive"]), _shared(r["shared"]), float(r["fraction"])),
            gpu_indices=tuple(r["gpu_indices"]), pid=int(r["pid"]), pid_ticks=int(r["pid_ticks"]),
            shim_pid=int(r["shim_pid"]), shim_ticks=int(r["shim_ticks"]), exit_code=int(r["exit_code"]),
            message=r["message"], stop_reason=r["stop_reason"], started_at=float(r["started_at"]),
            lost=r.get("lost", ""), adopted=True, throttle_level=int(r.get("throttle_level", 0)),
            throttle_via=r.get("throttle_via", "quota"), packed_with=int(r.get("packed_with", 0)),
            startup=Startup.readopted() if r.get("starting") else None,
        )


def log_tail(path: Path, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last lines of a task's log, bounded (for exit messages)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 8192))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    text = "\n".join(data.rstrip("\n").splitlines()[-lines:])
    return text[-chars:]


#: How a task's exit is counted (on /metrics): the kinds, fixed so the counts never change shape.
EXIT_KINDS = ("ok", "restart", "failed", "oom", "stopped", "lost", "launch_failed")


@dataclass
class TaskCounts:
    """Running totals since the agent started (read by /metrics; only the main loop writes)."""

    launched: int = 0
    readopted: int = 0
    exits: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EXIT_KINDS, 0))
    oom_kills: int = 0


def key_of_cgroup(name: str) -> TaskKey | None:
    """"job7-a2-r0" -> TaskKey(7, 2, 0) (the inverse of Task.cgroup); None for anything else."""
    parts = name.split("-")
    if len(parts) != 3 or not (parts[0].startswith("job") and parts[1][:1] == "a" and parts[2][:1] == "r"):
        return None
    try:
        return TaskKey(int(parts[0][3:]), int(parts[1][1:]), int(parts[2][1:]))
    except ValueError:
        return None


def _shared(value: object) -> tuple[int, ...]:
    """A record's shared cores: a list, or (state files before the pool) one core or None."""
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(c) for c in value)  # type: ignore[union-attr]
