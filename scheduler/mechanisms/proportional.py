from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Sequence

from synergy.scheduler.mechanisms.base import pack_order, runnable_by_gpu
from synergy.scheduler.model import Job, RoundInput, RoundOutput
from synergy.scheduler.placement.fit import place
from synergy.scheduler.placement.scorers import Scorer, best_fit
from synergy.scheduler.state import ClusterState
from synergy.scheduler.throughput import proportional_per_gpu


@dataclass(frozen=True)
class Proportional:
    """The baseline of today's schedulers: CPU and memory in proportion to GPUs.

    Every GPU carries exactly its proportional CPU and memory, so whenever the GPUs fit the
    job fits; placement only decides consolidation.
    """

    name: str = "proportional"
    order_only: ClassVar[bool] = True
    #: Only `runnable_by_gpu`'s jobs are packed (mechanisms/base.py).
    runnable_only: ClassVar[bool] = True
    scorer: Scorer = field(default=best_fit)

    def allocate(self, ordered: Sequence[Job], inp: RoundInput) -> RoundOutput:
        state = ClusterState(inp.cluster)
        runnable, waiting = runnable_by_gpu(ordered, state.free_gpus)
        c, m = proportional_per_gpu(inp.cluster)
        demand = {j.id: (c, m) for j in runnable}
        for job in pack_order(runnable, demand, inp.last):
            found = place(state, job.gpus, c, m, self.scorer)
            if found is None:
                waiting[job.id] = f"no server set fits {job.gpus} GPUs at the proportional share"
                continue
            state.reserve(job.id, found)
        return RoundOutput(state.allocations(), waiting)
