from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from synergy.scheduler.model import Cluster, Job


@dataclass(frozen=True)
class Las:
    """Least attained service (Tiresias): fewest GPU-seconds received so far first."""

    name: str = "las"
    static_order: ClassVar[bool] = False

    def order(self, jobs: Sequence[Job], now_s: float, cluster: Cluster) -> list[Job]:
        return sorted(jobs, key=lambda j: (j.attained_gpu_s, j.arrival_s, j.id))
