"""Policies order the queue (Kubernetes' QueueSort stage); mechanisms decide the rest."""
from __future__ import annotations

from typing import Protocol, Sequence

from synergy.scheduler.model import Cluster, Job


class Policy(Protocol):
    name: str

    def order(self, jobs: Sequence[Job], now_s: float, cluster: Cluster) -> list[Job]:
        """Return the jobs highest priority first. Must be deterministic: ties break on id."""
        ...
