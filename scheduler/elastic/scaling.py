"""How an elastic job's running time depends on its GPUs, and the items it offers the MCKP.

Lyra §5 assumes throughput scales linearly within a job's range: the profile's iteration
time holds at the job's requested size (`Job.gpus`), so at g GPUs the job runs g / gpus as
fast. The rate is taken at the GPU-proportional CPU and memory share, as SRTF measures it,
so a job's sizes do not depend on the CPU and memory TUNE is about to give it.
"""
from __future__ import annotations

from synergy.scheduler.elastic.mckp import Item
from synergy.scheduler.model import Cluster, Job, JobKind
from synergy.scheduler.throughput import iterations_per_s, proportional_speed


def is_elastic(job: Job) -> bool:
    return job.kind == JobKind.ELASTIC and job.min_gpus is not None and job.max_gpus is not None


def base_gpus(job: Job) -> int:
    """Phase one's demand: the minimum of an elastic job, the fixed size of any other."""
    return int(job.min_gpus) if is_elastic(job) else job.gpus


def sizes(job: Job) -> range:
    """The GPU counts the job may run at: min, min + step, ... up to max (step = GPUs per worker)."""
    if not is_elastic(job):
        return range(job.gpus, job.gpus + 1)
    step = max(1, job.gpus_per_worker)
    return range(int(job.min_gpus), int(job.max_gpus) + 1, step)


def scale(job: Job, gpus: float) -> float:
    """How many times its profile's rate a job makes at `gpus` GPUs: gpus / job.gpus for an
    elastic job (linear scaling, §5), 1 for any other (it runs at its size or not at all)."""
    return gpus / job.gpus if is_elastic(job) and job.gpus > 0 else 1.0


def gpu_seconds_left(job: Job, relative_speed: float) -> float:
    """Remaining work in GPU-seconds: the time to finish at g GPUs is this over g."""
    rate = iterations_per_s(job, relative_speed)
    return job.remaining_iterations * job.gpus / rate if rate > 0 else float("inf")


def remaining_s(job: Job, gpus: int, cluster: Cluster) -> float:
    """Time to finish at `gpus` GPUs under linear scaling (inf when it cannot progress)."""
    return gpu_seconds_left(job, proportional_speed(job, cluster)) / gpus


def flexible_items(job: Job, cluster: Cluster, relative_speed: float | None = None) -> list[Item]:
    """Figure 6: one item per extra worker count, weight = extra GPUs, value = the running
    time it saves over running at the base demand. `relative_speed`: the job's speed at
    its proportional share, when the caller has it already (it depends on the profile only)."""
    work = gpu_seconds_left(job, proportional_speed(job, cluster) if relative_speed is None else relative_speed)
    if work == float("inf"):
        return []
    base = base_gpus(job)
    return [Item(g - base, work / base - work / g) for g in sizes(job) if g > base]
