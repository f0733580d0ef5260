from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from synergy.scheduler.model import Cluster, Job
from synergy.scheduler.throughput import proportional_remaining_s


@dataclass(frozen=True)
class Srtf:
    """Shortest remaining time first, measured at the GPU-proportional speed so that the
    order does not depend on the allocation the mechanism is about to choose."""

    name: str = "srtf"
    static_order: ClassVar[bool] = False

    def order(self, jobs: Sequence[Job], now_s: float, cluster: Cluster) -> list[Job]:
        return sorted(jobs, key=lambda j: (proportional_remaining_s(j, cluster), j.arrival_s, j.id))
