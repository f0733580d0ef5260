"""Hit / miss / byte counters of the MinIO cache, as one small dataclass.

The same shape serves one process (`MinioCache.local_stats()`) and the whole job
(`MinioCache.stats()`, summed over every process's slot in shared memory), so the profiler,
the lease reports and `synergy describe` read one format.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CacheStats:
    """Counters of reads through the cache and the cache's current fill."""

    #: Reads served from the cache, and the bytes they returned.
    hits: int = 0
    hit_bytes: int = 0
    #: Reads the cache could not serve (the caller loaded the item), and the bytes loaded.
    misses: int = 0
    miss_bytes: int = 0
    #: Items in the cache now and the bytes they hold (<= capacity_bytes).
    items: int = 0
    used_bytes: int = 0
    capacity_bytes: int = 0
    #: Admissions refused because the item did not fit (full, larger than the cache, index full).
    rejected: int = 0

    @property
    def hit_rate(self) -> float:
        """Fraction of reads served from memory (0.0 before the first read)."""
        reads = self.hits + self.misses
        return self.hits / reads if reads else 0.0

    def as_dict(self) -> dict[str, float]:
        """Plain numbers for a lease report or a JSON line; includes `hit_rate`."""
        out: dict[str, float] = dict(asdict(self))
        out["hit_rate"] = self.hit_rate
        return out
