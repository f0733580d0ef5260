"""synergy.cache: the per-job MinIO application cache (DS-Analyzer's policy, Synergy §3.1).

Items are cached on first access until the job's byte capacity is full and never evicted, so
each epoch's hit rate is capacity / dataset size: the predictable memory axis the scheduler's
optimistic profiling models instead of measuring. See docs/cache.md.
"""

from synergy.cache.dataset import CachedFileDataset
from synergy.cache.minio import MinioCache, remove_stale_segments
from synergy.cache.sizing import DEFAULT_FRACTION, capacity_from_allocation
from synergy.cache.stats import CacheStats

__all__ = [
    "CacheStats",
    "CachedFileDataset",
    "DEFAULT_FRACTION",
    "MinioCache",
    "capacity_from_allocation",
    "remove_stale_segments",
]
