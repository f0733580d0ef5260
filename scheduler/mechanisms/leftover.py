"""Hand CPU and memory that nobody demanded to the co-located jobs that speed up most.

§4.2's packing gives each job its best-case demand or its proportional share, and can leave
CPU and memory unallocated on a server: a job whose best case does not fit falls back to
proportional even when half of what it wanted is free. §5.3.2 describes the behaviour we
want ("the unallocated CPU and memory is assigned to the jobs that benefit from additional
auxiliary resources"), which is also how the §2.1 example reaches Table 3. This step only
adds resources, so no job slows down and the GPU-proportional guarantee still holds.
"""
from __future__ import annotations

from typing import Mapping

from synergy.scheduler.model import EPS, Job, Placement
from synergy.scheduler.state import ClusterState


def redistribute(state: ClusterState, jobs: Mapping[int, Job]) -> set[int]:
    """Top up single-server jobs toward their saturating demand; returns the ids changed.

    Split jobs are left alone: their share must stay proportional on every server.
    """
    changed: set[int] = set()
    for i in range(len(state.ids)):
        if state.free_c[i] <= EPS and state.free_m[i] <= EPS:
            continue
        local = [jid for jid in sorted(state.on_server[i]) if len(state.held[jid]) == 1]
        # Largest possible gain first: what the job would gain from all that is free here.
        gains = []
        for jid in local:
            job, p = jobs[jid], state.held[jid][0]
            now = job.profile.speed(p.cpus / p.gpus, p.mem_gb / p.gpus)
            best = job.profile.speed((p.cpus + state.free_c[i]) / p.gpus, (p.mem_gb + state.free_m[i]) / p.gpus)
            if best > now * (1 + 1e-6):
                gains.append((-(best / now if now > 0 else float("inf")), jid))
        for _, jid in sorted(gains):
            job, p = jobs[jid], state.held[jid][0]
            c_sat, m_sat = job.profile.best_case()
            cpus = min(max(p.cpus, c_sat * p.gpus), p.cpus + state.free_c[i])
            mem = min(max(p.mem_gb, m_sat * p.gpus), p.mem_gb + state.free_m[i])
            if job.profile.speed(cpus / p.gpus, mem / p.gpus) <= job.profile.speed(p.cpus / p.gpus, p.mem_gb / p.gpus):
                continue
            state.release(jid)
            state.reserve(jid, (Placement(p.server_id, p.gpus, cpus, mem),))
            changed.add(jid)
    return changed
