"""A task: one attempt of one job on one node rank, as the daemon and the agent both name it.

The agent supervises tasks and the daemon reconciles what agents report against what it
wants; both key everything by the same triple and speak of the same phases (TaskRef and
TaskState in protos/synergy/v1/node.proto), so both import them from here.
"""

from __future__ import annotations

import enum
from typing import Protocol

from synergy.common.values import ordered_value


#: Exit code an agent reports for a task that could not be started (like a shell's
#: "command not found"); its message says why.
LAUNCH_FAILED = 127
#: How such a message starts when the node could not hold the placement the daemon sent
#: (its cores, GPUs or memory are not free as the daemon counted them): not the job's fault,
#: so the daemon requeues the job instead of failing it.
IMPOSSIBLE_PLACEMENT = "impossible placement"


#: At most this many jobs share one GPU (Tesserae §5, after Gavel and Lucid): the core packs
#: a guest only onto a host that is not packed yet, and an agent refuses a task that would
#: make a GPU index carry more. One number for both, here where the agent can read it
#: without loading the core.
MAX_JOBS_PER_GPU = 2


class TaskPhase(str, enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    EXITED = "exited"


class _Ref(Protocol):
    job_id: int
    attempt: int
    rank: int


@ordered_value
class TaskKey:
    """One task = one attempt of one job on one node (its node rank)."""

    job_id: int
    attempt: int
    rank: int

    def __str__(self) -> str:
        return f"{self.job_id}-{self.attempt}-{self.rank}"

    @classmethod
    def of(cls, ref: _Ref) -> TaskKey:
        """From a `TaskRef` message (or anything with the three fields)."""
        return cls(int(ref.job_id), int(ref.attempt), int(ref.rank))


#: Value objects (synergy.common.values): never assigned after they are built.
VALUE_TYPES: tuple[type, ...] = (TaskKey,)
