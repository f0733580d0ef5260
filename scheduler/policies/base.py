"""Policies order the queue (Kubernetes' QueueSort stage); mechanisms decide the rest."""
from __future__ import annotations

from typing import ClassVar, Protocol, Sequence

from synergy.scheduler.model import Cluster, Job


class Policy(Protocol):
    name: str
    #: True when the order is a sort on a key of each job's own fields that never change
    #: while it is active (arrival, id, GPUs, profile): a shell may then skip a round whose
    #: active set is unchanged, and a job joining never reorders the others. False for
    #: anything reading progress or time (SRTF, LAS, FTF, Tetris).
    static_order: ClassVar[bool]

    def order(self, jobs: Sequence[Job], now_s: float, cluster: Cluster) -> list[Job]:
        """Return the jobs highest priority first. Must be deterministic: ties break on id."""
        ...
