from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from synergy.scheduler.model import Cluster, Job
from synergy.scheduler.throughput import best_case_per_gpu


@dataclass(frozen=True)
class Drf:
    """Dominant resource fairness (§5.7 baseline) with every job as its own user.

    DRF's progressive filling admits the user with the smallest dominant share next; with one
    task per user that is the job whose best-case demand has the smallest dominant share of
    the cluster. As in the paper, the demand comes from Synergy's profile.
    """

    name: str = "drf"
    static_order: ClassVar[bool] = True

    def order(self, jobs: Sequence[Job], now_s: float, cluster: Cluster) -> list[Job]:
        total = cluster.total

        def dominant(j: Job) -> float:
            c, m = best_case_per_gpu(j, cluster)
            return max(j.gpus / total.gpus, c * j.gpus / total.cpus, m * j.gpus / total.mem_gb)

        return sorted(jobs, key=lambda j: (dominant(j), j.arrival_s, j.id))
