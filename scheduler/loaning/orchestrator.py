"""Lyra's resource orchestrator (§3, Figure 4): how many inference servers are on loan.

Each interval the inference scheduler says how many of its servers it needs; every other
inference server is loaned to training. When the need rises above what is left at home,
the orchestrator reclaims the difference, choosing the loaned servers with `plan_reclaim`
so the fewest training jobs are preempted (elastic jobs that can scale in do so instead). Loans take the idle inference servers in their
given order, so a run is deterministic.

Pure: server ids, a demand and the running allocations in; a decision out. The simulator
applies it each round; the daemon's `nodes reclaim` uses `plan_reclaim` the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from synergy.scheduler.loaning.reclaim import ReclaimPlan, plan_reclaim
from synergy.scheduler.model import Allocation, Job, Server


@dataclass(frozen=True)
class LoanDecision:
    """The loaned servers after this interval, and what changed to get there."""

    loaned: tuple[str, ...]
    lent: tuple[str, ...] = ()
    #: None when nothing is reclaimed.
    reclaim: ReclaimPlan | None = None


def rebalance(
    inference: Sequence[Server], loaned: Sequence[str], needed: int, allocations: Mapping[int, Allocation],
    jobs: Mapping[int, Job] | None = None,
) -> LoanDecision:
    """Loan every inference server the inference load does not need; reclaim the excess.

    `inference`: the whole inference pool in loan order; `loaned`: the ids on loan now;
    `needed`: servers inference needs this interval (clamped to the pool's size); `jobs`:
    the running jobs by id, whose elastic ranges let them scale in (`plan_reclaim`).
    """
    ids = [s.id for s in inference]
    on_loan = [sid for sid in ids if sid in set(loaned)]
    spare = len(ids) - max(0, min(needed, len(ids)))
    if len(on_loan) > spare:
        by_id = {s.id: s for s in inference}
        plan = plan_reclaim([by_id[sid] for sid in on_loan], allocations, len(on_loan) - spare, jobs=jobs)
        back = set(plan.servers)
        return LoanDecision(tuple(sid for sid in on_loan if sid not in back), (), plan)
    lent = tuple(sid for sid in ids if sid not in set(on_loan))[: spare - len(on_loan)]
    return LoanDecision(tuple(sid for sid in ids if sid in set(on_loan) | set(lent)), lent)
