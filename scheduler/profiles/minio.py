"""The analytic throughput model behind optimistic profiling (§3.1 of the paper).

A training job moves every sample through three stages: fetch from storage (unless the
MinIO cache holds it), pre-process on CPUs, compute on the GPU. Per GPU, the job runs at
the speed of the slowest stage::

    rate(c, m) = min(gpu_rate, cpu_rate(c), storage_rate(m))

* ``cpu_rate(c) = cpu_rate_one_core * c ** cpu_alpha`` (alpha < 1: diminishing returns);
* MinIO (§3.1) caches a fixed subset of the dataset and never evicts it, so an epoch gets a
  fixed number of hits: ``hit = min(1, max(0, m - process_mem_gb) / dataset_gb)``;
* ``storage_rate(m) = storage_share / ((1 - hit) * sample_bytes)``, infinite once the whole
  dataset is cached.

This is why Synergy only measures the CPU axis at full memory and fills in the memory axis
analytically: the memory axis is a known function of the dataset size and the storage
bandwidth. The zoo (zoo_models.py) uses this model to turn the paper's stated facts into full
sensitivity matrices; the profiler can use it to complete a measured CPU curve.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from synergy.scheduler.profiles.format import SensitivityProfile

#: The grid every built-in profile is sampled on (per GPU). Rows include every CPU:GPU
#: ratio of the paper's Table 2b servers (3-6) and the points its facts name (9, 12, 24).
CPUS_PER_GPU: tuple[float, ...] = (1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 14, 16, 20, 24)
#: Columns: 20 GB is the process memory of a training job (§2.1), 62.5 GB the GPU-proportional
#: share of a 500 GB / 8-GPU server (§5.1), 500 GB the whole server.
MEM_GB_PER_GPU: tuple[float, ...] = (20, 31.25, 62.5, 125, 250, 375, 500)
#: §5.1: the paper's servers have 3 CPUs and 62.5 GB per GPU; profiles are relative to it.
REFERENCE: tuple[float, float] = (3.0, 62.5)
#: Digits kept in generated profiles (keeps zoo.json readable and byte-stable).
DIGITS = 4


@dataclass(frozen=True)
class MinioModel:
    """Parameters of one model's data pipeline, per GPU. Units are in the field names."""

    #: Samples/s the GPU processes when it never waits for data.
    gpu_samples_per_s: float
    #: Samples/s one CPU core pre-processes (decode, augment, collate).
    cpu_samples_per_s_one_core: float
    #: Exponent of CPU scaling: c cores pre-process ``one_core * c ** alpha`` samples/s.
    cpu_alpha: float
    #: Size of the training set as stored (what MinIO caches).
    dataset_gb: float
    #: Mean stored size of one sample.
    sample_kb: float
    #: Memory the training process itself needs; only memory above it caches data.
    process_mem_gb: float
    #: This GPU's share of the server's storage read bandwidth.
    storage_mb_s: float
    #: Samples per iteration per GPU (turns samples/s into seconds per iteration).
    batch_size: int

    def __post_init__(self) -> None:
        for name in ("gpu_samples_per_s", "cpu_samples_per_s_one_core", "cpu_alpha",
                     "dataset_gb", "sample_kb", "storage_mb_s", "batch_size"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"MinioModel: field {name!r} must be a positive number, got {value!r}")
        if not math.isfinite(self.process_mem_gb) or self.process_mem_gb < 0:
            raise ValueError(f"MinioModel: field 'process_mem_gb' must be >= 0, got {self.process_mem_gb!r}")


def cpu_rate(p: MinioModel, cpus: float) -> float:
    """Samples/s that `cpus` cores pre-process."""
    return p.cpu_samples_per_s_one_core * max(cpus, 0.0) ** p.cpu_alpha


def hit_fraction(mem_gb: float, process_mem_gb: float, dataset_gb: float) -> float:
    """MinIO's hit rate: the cached fraction of the dataset, with memory above the process's own.

    The one definition of the memory axis; `hit_rate` (a `MinioModel`) and the profiler's fill
    (a measured CPU curve, `synergy.profiler.fill`) both call it.
    """
    cached = max(0.0, mem_gb - process_mem_gb)
    return min(1.0, cached / dataset_gb)


def storage_samples_per_s(miss: float, sample_kb: float, storage_mb_s: float) -> float:
    """Samples/s storage delivers when a fraction `miss` of the samples is read from it."""
    if miss <= 0.0:
        return math.inf
    return storage_mb_s * 1e6 / (miss * sample_kb * 1e3)


def miss_for_storage_rate(samples_per_s: float, sample_kb: float, storage_mb_s: float) -> float:
    """The miss fraction at which storage delivers exactly `samples_per_s`: the inverse of
    `storage_samples_per_s`. At or above 1, storage keeps up even when nothing is cached."""
    return storage_mb_s * 1e6 / (samples_per_s * sample_kb * 1e3)


def hit_rate(p: MinioModel, mem_gb: float) -> float:
    """Fraction of an epoch's samples MinIO serves from memory at `mem_gb` per GPU."""
    return hit_fraction(mem_gb, p.process_mem_gb, p.dataset_gb)


def storage_rate(p: MinioModel, mem_gb: float) -> float:
    """Samples/s storage delivers given the misses at `mem_gb`; inf when all is cached."""
    return storage_samples_per_s(1.0 - hit_rate(p, mem_gb), p.sample_kb, p.storage_mb_s)


def rate(p: MinioModel, cpus: float, mem_gb: float) -> float:
    """Samples/s per GPU at (cpus, mem_gb) per GPU: the slowest of the three stages."""
    return min(p.gpu_samples_per_s, cpu_rate(p, cpus), storage_rate(p, mem_gb))


def fully_cached_rate(p: MinioModel, cpus: float) -> float:
    """Samples/s with the whole dataset in memory (how Fig. 2 of the paper was measured)."""
    return min(p.gpu_samples_per_s, cpu_rate(p, cpus))


def one_core_rate_for(gpu_samples_per_s: float, saturating_cpus: float, alpha: float) -> float:
    """The one-core rate at which `saturating_cpus` cores exactly keep the GPU busy.

    Lets a model be stated the way the paper states it ("saturates at 9 CPUs/GPU").
    """
    return gpu_samples_per_s / saturating_cpus ** alpha


def alpha_for_speedup(speedup: float, cpus_from: float, cpus_to: float) -> float:
    """Exponent that makes going from `cpus_from` to `cpus_to` cores `speedup` times faster
    (both CPU-bound), e.g. §2.1's "3 to 12 CPUs: 3.1x faster for AlexNet"."""
    return math.log(speedup) / math.log(cpus_to / cpus_from)


def storage_share_for_memory_speedup(
    gpu_samples_per_s: float,
    dataset_gb: float,
    sample_kb: float,
    process_mem_gb: float,
    mem_from_gb: float,
    speedup: float,
) -> float:
    """Storage MB/s per GPU under which raising memory from `mem_from_gb` until the job is
    GPU-bound makes it `speedup` times faster (CPUs saturated).

    Inverts the model for a measured memory fact: at `mem_from_gb` the job is storage-bound
    at gpu_rate / speedup, so share = gpu_rate / speedup * miss * sample size.
    """
    cached = max(0.0, mem_from_gb - process_mem_gb)
    miss = 1.0 - min(1.0, cached / dataset_gb)
    return gpu_samples_per_s / speedup * miss * sample_kb * 1e3 / 1e6


def build_profile(
    model: str,
    task: str,
    p: MinioModel,
    source: str = "",
    cpus_per_gpu: tuple[float, ...] = CPUS_PER_GPU,
    mem_gb_per_gpu: tuple[float, ...] = MEM_GB_PER_GPU,
    reference: tuple[float, float] = REFERENCE,
) -> SensitivityProfile:
    """Sample the model on a grid, normalised so the reference cell is exactly 1.0.

    `iter_time_s` is the seconds per iteration at the reference (batch / samples per s).
    """
    ref = rate(p, *reference)
    if not ref > 0:
        raise ValueError(f"{model}: rate at the reference {reference} is zero")
    table = tuple(
        tuple(round(rate(p, c, m) / ref, DIGITS) for m in mem_gb_per_gpu) for c in cpus_per_gpu
    )
    return SensitivityProfile(
        model=model,
        task=task,
        cpus_per_gpu=tuple(float(c) for c in cpus_per_gpu),
        mem_gb_per_gpu=tuple(float(m) for m in mem_gb_per_gpu),
        throughput=table,
        reference=(float(reference[0]), float(reference[1])),
        iter_time_s=round(p.batch_size / ref, DIGITS),
        source=source,
    )
