from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Sequence

from synergy.scheduler.model import Job, RoundInput, RoundOutput
from synergy.scheduler.placement.fit import place
from synergy.scheduler.placement.scorers import Scorer, first_fit
from synergy.scheduler.state import ClusterState
from synergy.scheduler.throughput import best_case_per_gpu


@dataclass(frozen=True)
class Greedy:
    """Synergy-GREEDY (§3.3): first fit of each job's best-case demand, in policy order.

    A job that fits nowhere along all dimensions is skipped for the round. That is the
    mechanism's known flaw, kept on purpose as the paper's baseline: CPU or memory run out
    while GPUs idle, and skipped jobs can starve.
    """

    name: str = "greedy"
    order_only: ClassVar[bool] = True
    #: Every queued job is tried while a GPU is free, not only `runnable_by_gpu`'s.
    runnable_only: ClassVar[bool] = False
    scorer: Scorer = field(default=first_fit)

    def allocate(self, ordered: Sequence[Job], inp: RoundInput) -> RoundOutput:
        state = ClusterState(inp.cluster)
        waiting: dict[int, str] = {}
        for job in ordered:
            if state.free_gpus < 1 - 1e-9:
                waiting[job.id] = "waiting: no GPU left this round"
                continue
            c, m = best_case_per_gpu(job, inp.cluster)
            found = place(state, job.gpus, c, m, self.scorer)
            if found is None:
                waiting[job.id] = (
                    f"skipped: no server fits {job.gpus} GPUs, {c * job.gpus:g} CPUs, "
                    f"{m * job.gpus:g} GB (best-case demand)"
                )
                continue
            state.reserve(job.id, found)
        return RoundOutput(state.allocations(), waiting)
