"""The core's pass over loaned servers (Lyra §5.3: dedicated training servers first).

The filters admit a LOANED server like any other (`placement/filters.py`), but only
loanable jobs (`eligibility.py`) may use one. The core therefore schedules in two passes
over the same policy order: every GPU job on the open training servers, then the loanable
jobs still waiting on the open loaned servers. A job never spans both pools, so reclaiming
a loaned server never preempts a job that also holds training GPUs.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from synergy.scheduler.loaning.eligibility import is_loanable
from synergy.scheduler.mechanisms.base import Mechanism
from synergy.scheduler.placement import gpu_types
from synergy.scheduler.model import Cluster, Job, RoundInput, RoundOutput, ServerPool


def split_loaned(cluster: Cluster) -> tuple[Cluster, Cluster]:
    """(the cluster's own servers, its loaned ones); `cluster` itself when none is loaned."""
    if not any(s.pool == ServerPool.LOANED for s in cluster.servers):
        return cluster, Cluster(())
    own = tuple(s for s in cluster.servers if s.pool != ServerPool.LOANED)
    loaned = tuple(s for s in cluster.servers if s.pool == ServerPool.LOANED)
    return Cluster(own, share_basis=cluster.share_basis), Cluster(loaned, share_basis=cluster.share_basis)


def place_on_loaned(
    mechanism: Mechanism, ordered: Sequence[Job], inp: RoundInput, loaned: Cluster, first: RoundOutput
) -> RoundOutput:
    """`first` (the training pass) plus the loanable jobs it left waiting, placed on `loaned`."""
    if not loaned.servers:  # the common case: no loan, and no job's eligibility to work out
        return first
    candidates = [j for j in ordered if j.id not in first.allocations and is_loanable(j, inp.cluster)]
    if not candidates:
        return first
    second = gpu_types.allocate(mechanism, candidates, replace(inp, cluster=loaned, jobs=candidates))
    waiting = {jid: why for jid, why in first.waiting.items() if jid not in second.allocations}
    return RoundOutput({**first.allocations, **second.allocations}, waiting, first.reverted | second.reverted)
