"""synergy.profiler: optimistic profiling of a job's CPU and memory sensitivity (§3.1).

* `search.OptimisticSearch`: which CPU counts to measure (start at the maximum, binary search,
  10% threshold); `coda.CodaSearch`: CODA's adaptive allocator as the alternative.
* `window.ThroughputWindow`: one point's samples/s over real iterations, warm-up excluded.
* `fill.complete_profile`: the measured CPU curve at full memory plus the MinIO model
  (`synergy.scheduler.profiles.minio`) gives the whole profile (docs/profiles.md).
* `storage.measure_read_bandwidth`: the storage bandwidth that model needs.

All pure (the caller injects clocks and measurements) except `storage`, which reads files.
"""
