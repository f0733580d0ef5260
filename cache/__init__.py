"""synergy.cache: the per-job MinIO application cache (DS-Analyzer's policy, Synergy §3.1).

Items are cached on first access until the job's byte capacity is full and never evicted, so
each epoch's hit rate is capacity / dataset size: the predictable memory axis the scheduler's
optimistic profiling models instead of measuring. See docs/cache.md.

`CachedFileDataset` and `find_caches` load torch's Dataset base when first named, so the
agent, which only cleans up segments (`remove_stale_segments`), never imports torch.
"""

from typing import Any

from synergy.cache.minio import MinioCache, remove_stale_segments
from synergy.cache.sizing import DEFAULT_FRACTION, capacity_from_allocation
from synergy.cache.stats import CacheStats

__all__ = [
    "CacheStats",
    "CachedFileDataset",
    "DEFAULT_FRACTION",
    "FoundCache",
    "MinioCache",
    "capacity_from_allocation",
    "find_caches",
    "remove_stale_segments",
]

_LAZY = {"CachedFileDataset": "synergy.cache.dataset", "FoundCache": "synergy.cache.discover",
         "find_caches": "synergy.cache.discover"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'synergy.cache' has no attribute {name!r}")
