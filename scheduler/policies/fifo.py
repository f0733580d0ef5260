from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar, Sequence

from synergy.scheduler.model import Cluster, Job

#: (arrival, id) as a sort key, read without a Python call per job.
_ARRIVAL = attrgetter("arrival_s", "id")


@dataclass(frozen=True)
class Fifo:
    """First in, first out: arrival time, then job id."""

    name: str = "fifo"
    static_order: ClassVar[bool] = True

    def order(self, jobs: Sequence[Job], now_s: float, cluster: Cluster) -> list[Job]:
        return sorted(jobs, key=_ARRIVAL)
