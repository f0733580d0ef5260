"""Which jobs may run on servers loaned from the inference cluster (Lyra §2.1, §5.3).

A loaned server can be reclaimed at any round, and reclaiming it preempts every job with a
share on it. Lyra therefore sends there only jobs that lose little when that happens:
elastic jobs (their extra workers go first, §5.3) and short jobs (little work since their
last checkpoint, and soon done). A job's own `Job.loanable` flag overrides the rule either
way; this module is the one place the rule and "short" are defined.
"""
from __future__ import annotations

from synergy.scheduler.model import Cluster, Job, JobKind
from synergy.scheduler.throughput import proportional_remaining_s

#: A job is short when its remaining work at its GPU-proportional share takes at most this
#: long: one hour, a round trip of Lyra's diurnal inference load being far longer.
SHORT_JOB_S = 3600.0


def is_short(job: Job, cluster: Cluster) -> bool:
    """Remaining time at the proportional share (what SRTF reads) within SHORT_JOB_S."""
    return proportional_remaining_s(job, cluster) <= SHORT_JOB_S


def is_loanable(job: Job, cluster: Cluster) -> bool:
    """The job's flag when set, else: elastic, or short on `cluster`."""
    if job.loanable is not None:
        return job.loanable
    return job.kind == JobKind.ELASTIC or is_short(job, cluster)
