"""How fast a job trains under an allocation, and under its GPU-proportional share."""
from __future__ import annotations

from synergy.scheduler.model import Allocation, Cluster, Job


def landed_speed(job: Job, alloc: Allocation, cluster: Cluster) -> float:
    """Relative speed under `alloc` on the GPU type it runs on in `cluster` (its profile's
    speed on that type, `SensitivityProfile.speed_on`): what the simulator advances it by.
    On an untyped cluster this is `speed(job, alloc)`."""
    return job.profile.speed_on(cluster.gpu_type_of(alloc.placements[0].server_id) if alloc.placements else "",
                                *alloc.per_gpu)


def proportional_per_gpu(cluster: Cluster) -> tuple[float, float]:
    share = cluster.proportional_share(1)
    return share.cpus, share.mem_gb


def speed(job: Job, alloc: Allocation) -> float:
    """Relative speed (1.0 = the profile's reference cell) under `alloc`."""
    return job.profile.speed(*alloc.per_gpu)


def proportional_speed(job: Job, cluster: Cluster) -> float:
    return job.profile.speed(*proportional_per_gpu(cluster))


def iterations_per_s(job: Job, relative_speed: float) -> float:
    return relative_speed / job.profile.iter_time_s


def proportional_remaining_s(job: Job, cluster: Cluster) -> float:
    """Remaining time if the job ran at its GPU-proportional speed (SRTF, FTF)."""
    rate = iterations_per_s(job, proportional_speed(job, cluster))
    return job.remaining_iterations / rate if rate > 0 else float("inf")


def best_case_per_gpu(job: Job, cluster: Cluster) -> tuple[float, float]:
    """The job's demand vector per GPU: best case, but never slower than proportional."""
    return job.profile.best_case(floor=proportional_speed(job, cluster))
