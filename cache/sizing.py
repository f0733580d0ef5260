"""How many bytes a job's MinIO cache may hold, from its memory allocation.

The scheduler's model (`synergy.scheduler.profiles.minio`) assumes that the memory a job is
given above what the training process itself needs caches data, so that an epoch's hit rate is
``min(1, (mem_gb - process_mem_gb) / dataset_gb)``. The agent hands the allocation to the job
as ``SYNERGY_ALLOC_MEM_GB`` (`synergy.common.contract`); this module turns it into a byte
capacity. GB means 10**9 bytes, as in the model.
"""

from __future__ import annotations

import math

#: Bytes per GB, as the scheduler's model counts them (dataset_gb, sample_kb * 1e3).
BYTES_PER_GB = 10**9
#: Default share of the memory above the process's own needs given to the cache. The rest is
#: headroom for decoded batches, pinned buffers and allocator slack, which the model does not
#: count; a job that knows its footprint can pass 1.0 with an exact `process_mem_gb`.
DEFAULT_FRACTION = 0.8


def capacity_from_allocation(
    alloc_mem_gb: float, fraction: float = DEFAULT_FRACTION, process_mem_gb: float = 0.0
) -> int:
    """Cache bytes for a job given `alloc_mem_gb`: ``(alloc - process_mem) * fraction``.

    Never negative: an allocation at or below the process's own memory gives a capacity of 0,
    a cache that serves every read from storage (the model's hit rate 0). Raises ValueError
    naming the argument that is not a finite number in range.
    """
    for name, value in (("alloc_mem_gb", alloc_mem_gb), ("process_mem_gb", process_mem_gb)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    return int(max(0.0, alloc_mem_gb - process_mem_gb) * fraction * BYTES_PER_GB)
