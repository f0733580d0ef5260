from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from synergy.scheduler.model import Cluster, Job
from synergy.scheduler.throughput import iterations_per_s, proportional_speed


@dataclass(frozen=True)
class Ftf:
    """Finish-time fairness (Themis): largest rho = shared JCT / isolated JCT first.

    The shared JCT is estimated as time already spent in the system plus the remaining work
    at the GPU-proportional speed; the isolated JCT is the whole job at that speed, i.e. the
    JCT it would see alone on its proportional share. Jobs that fell furthest behind lead.
    """

    name: str = "ftf"
    static_order: ClassVar[bool] = False

    def order(self, jobs: Sequence[Job], now_s: float, cluster: Cluster) -> list[Job]:
        def rho(j: Job) -> float:
            rate = iterations_per_s(j, proportional_speed(j, cluster))
            if rate <= 0:
                return 0.0
            isolated = j.iterations / rate
            shared = max(0.0, now_s - j.arrival_s) + j.remaining_iterations / rate
            return shared / isolated if isolated > 0 else 0.0

        return sorted(jobs, key=lambda j: (-rho(j), j.arrival_s, j.id))
