"""The scheduling core: one round = the policy orders, the mechanism packs.

Pure and deterministic: no clock, no threads, no I/O. The daemon calls `Scheduler.schedule`
at every round boundary with the real time; the simulator calls it with simulated time.
"""
from __future__ import annotations

from dataclasses import dataclass

from synergy.scheduler.mechanisms.base import Mechanism
from synergy.scheduler.model import JobKind, RoundInput, RoundOutput, ServerPool
from synergy.scheduler.policies.base import Policy


@dataclass(frozen=True)
class Scheduler:
    policy: Policy
    mechanism: Mechanism

    def schedule(self, inp: RoundInput) -> RoundOutput:
        # Seams: other pools (Lyra loans, CODA CPU arrays) and job kinds get their own
        # passes here; this release schedules fixed-size training jobs on training servers.
        cluster = inp.cluster
        training = tuple(s for s in cluster.servers if s.pool == ServerPool.TRAINING)
        if len(training) != len(cluster.servers):
            cluster = type(cluster)(training)
        jobs = [j for j in inp.jobs if j.kind == JobKind.TRAINING]
        ordered = self.policy.order(jobs, inp.now_s, cluster)
        out = self.mechanism.allocate(ordered, RoundInput(inp.now_s, cluster, ordered, inp.previous, inp.round_s))
        waiting = dict(out.waiting)
        for j in inp.jobs:
            if j.kind != JobKind.TRAINING:
                waiting[j.id] = f"job kind {j.kind.value!r} is not scheduled by this release"
        return RoundOutput(out.allocations, waiting, out.reverted)
