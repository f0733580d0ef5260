"""How fast a job trains under an allocation, and under its GPU-proportional share."""
from __future__ import annotations

from synergy.scheduler.model import Allocation, Cluster, Job
from synergy.scheduler.profiles.pairs import PairTable

#: The normalised throughput assumed for a packed pair the table does not list.
UNPROFILED_PAIR_TPUT = 0.5


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


def packed_speed(
    job: Job, alloc: Allocation, cluster: Cluster, partner: Job | None, pairs: PairTable | None
) -> float:
    """Relative speed of `job` under `alloc` sharing its GPUs with `partner` (Tesserae §4.2):
    its speed alone on the GPU type it landed on (`landed_speed`) times its normalised
    throughput beside the partner's model. Alone (`partner` None) it is `landed_speed`. An
    unprofiled pair (a table that changed since the jobs were packed) is taken as an even
    time-slice, 0.5."""
    alone = landed_speed(job, alloc, cluster)
    if partner is None:
        return alone
    tput = None if pairs is None else pairs.throughput(job.model, partner.model)
    return alone * (UNPROFILED_PAIR_TPUT if tput is None else tput)


def proportional_speed(job: Job, cluster: Cluster) -> float:
    return job.profile.speed(*proportional_per_gpu(cluster))


def iterations_per_s(job: Job, relative_speed: float) -> float:
    return relative_speed / job.profile.iter_time_s


def proportional_remaining_s(job: Job, cluster: Cluster) -> float:
    """Remaining time if the job ran at its GPU-proportional speed (SRTF, FTF)."""
    rate = iterations_per_s(job, proportional_speed(job, cluster))
    return job.remaining_iterations / rate if rate > 0 else float("inf")


def best_case_per_gpu(job: Job, cluster: Cluster) -> tuple[float, float]:
    """The job's demand vector per GPU: best case, but never slower than proportional.

    A profile measured below one CPU (rows under 1) may ask for a fraction of a core, which
    the agent enforces as a CFS quota on the shared pool of cores. That is what lets a loading-light job
    give CPU to a loading-heavy one where the share is below one CPU per GPU (issue 14: on a
    0.5-CPU share, whole-CPU demands cannot tell the two apart). Where every GPU has a whole
    CPU or more, demands stay whole (`whole_cpu_demand`)."""
    c, m = job.profile.best_case(floor=proportional_speed(job, cluster))
    return whole_cpu_demand(c, proportional_per_gpu(cluster)[0]), m


def whole_cpu_demand(cpus_per_gpu: float, share_cpus_per_gpu: float) -> float:
    """`cpus_per_gpu` raised to one CPU when it is below one and the GPU-proportional share
    gives each GPU a whole CPU or more: fractions of a core only where the share calls for them."""
    if cpus_per_gpu < 1.0 <= share_cpus_per_gpu + 1e-9:
        return 1.0
    return cpus_per_gpu
