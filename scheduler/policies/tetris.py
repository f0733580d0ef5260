from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from synergy.scheduler.model import Cluster, Job
from synergy.scheduler.throughput import best_case_per_gpu, proportional_remaining_s


@dataclass(frozen=True)
class Tetris:
    """Tetris (§5.7 baseline): packing alignment blended with shortest remaining work.

    Tetris scores a job by how well its demand aligns with free resources plus an SRPT term.
    At the start of a round every resource is free, so the alignment is the job's normalised
    demand size; servers are then chosen by the `alignment` placement scorer. `weight`
    balances packing (1.0) against remaining time (0.0), as Tetris' epsilon knob does.
    """

    name: str = "tetris"
    static_order: ClassVar[bool] = False
    weight: float = 0.5

    def order(self, jobs: Sequence[Job], now_s: float, cluster: Cluster) -> list[Job]:
        if not jobs:
            return []
        # Alignment against one (the largest) server: what Tetris scores a machine with.
        big = max((s.capacity for s in cluster.servers), key=lambda r: (r.gpus, r.cpus, r.mem_gb))
        remaining = {j.id: proportional_remaining_s(j, cluster) for j in jobs}
        longest = max(remaining.values()) or 1.0

        def score(j: Job) -> float:
            c, m = best_case_per_gpu(j, cluster)
            align = min(1.0, (j.gpus / big.gpus + c * j.gpus / big.cpus + m * j.gpus / big.mem_gb) / 3)
            shortness = 1.0 - remaining[j.id] / longest
            return self.weight * align + (1 - self.weight) * shortness

        return sorted(jobs, key=lambda j: (-score(j), j.arrival_s, j.id))
