"""A task: one attempt of one job on one node rank, as the daemon and the agent both name it.

The agent supervises tasks and the daemon reconciles what agents report against what it
wants; both key everything by the same triple and speak of the same phases (TaskRef and
TaskState in protos/synergy/v1/node.proto), so both import them from here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class TaskPhase(str, enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    EXITED = "exited"


class _Ref(Protocol):
    job_id: int
    attempt: int
    rank: int


@dataclass(frozen=True, order=True)
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
