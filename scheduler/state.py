"""Free resources per server while one round's decision is being made.

A ClusterState lives only for the duration of one call into the core: mechanisms reserve
and release on it, and the final reservations become the round's allocations.
"""
from __future__ import annotations

import bisect
import heapq
from typing import Iterable, Iterator

from synergy.scheduler.model import EPS, Allocation, Cluster, Placement, Resources

BucketKey = tuple[float, float, float, float, float, float]
#: Above this many servers, searches go through bucket and free-GPU indexes.
INDEX_MIN_SERVERS = 32


class ClusterState:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ids = [s.id for s in cluster.servers]
        self.index = {sid: i for i, sid in enumerate(self.ids)}
        self.cap_g = [float(s.capacity.gpus) for s in cluster.servers]
        self.cap_c = [float(s.capacity.cpus) for s in cluster.servers]
        self.cap_m = [float(s.capacity.mem_gb) for s in cluster.servers]
        self.free_g = list(self.cap_g)
        self.free_c = list(self.cap_c)
        self.free_m = list(self.cap_m)
        #: job id -> its placements, in reservation order.
        self.held: dict[int, tuple[Placement, ...]] = {}
        #: server index -> ids of the jobs holding something there.
        self.on_server: list[set[int]] = [set() for _ in self.ids]
        #: Servers whose free resources changed, in order (`reserve` and `release` append one
        #: entry per placement): a search that remembers what it found reads what changed
        #: since it last looked instead of looking at every server again.
        self.changed: list[int] = []
        #: Such searches' memory, for the state's lifetime (one decision), under keys of
        #: their owners' choosing (scorers.StrandingBestFit.best_on).
        self.searches: dict = {}
        # Large clusters get search indexes (below); on a few dozen servers a plain scan is
        # cheaper than keeping them up to date.
        self._indexed = len(self.ids) > INDEX_MIN_SERVERS
        #: Small clusters: servers with a whole GPU free, in index order. A search for one or
        #: more GPUs visits only these; a full cluster has few, and TUNE fills it server by
        #: server, so most of the others would be looked at only to be turned down.
        self._open = [i for i, g in enumerate(self.free_g) if g + EPS >= 1.0]
        if self._indexed:
            # Servers with identical capacity and free resources are interchangeable to every
            # scorer except for their index tie-break, so searches visit one server per
            # bucket (the lowest index): O(distinct shapes), not O(servers).
            self._bucket_of: list[BucketKey] = [self._key(i) for i in range(len(self.ids))]
            #: shape -> [servers of that shape now, heap of indexes (with lazily dropped
            #: ones that moved away)]; a shape no server has is not kept.
            self._buckets: dict[BucketKey, list] = {}
            for i, key in enumerate(self._bucket_of):
                bucket = self._buckets.setdefault(key, [0, []])
                bucket[0] += 1
                bucket[1].append(i)
            # Servers by whole free GPUs (GPUs are handed out whole).
            self._level: dict[int, set[int]] = {}
            for i, g in enumerate(self.free_g):
                self._level.setdefault(int(round(g)), set()).add(i)
            #: How much of `changed` the indexes have taken in: they are brought up to date
            #: when searched, not per reservation (TUNE's own search needs neither).
            self._indexed_upto = 0

    @property
    def free_gpus(self) -> float:
        return sum(self.free_g)

    def fits(self, i: int, gpus: float, cpus: float, mem_gb: float) -> bool:
        return (
            gpus <= self.free_g[i] + EPS
            and cpus <= self.free_c[i] + EPS
            and mem_gb <= self.free_m[i] + EPS
        )

    def free(self, i: int) -> Resources:
        return Resources(self.free_g[i], self.free_c[i], self.free_m[i])

    def _key(self, i: int) -> BucketKey:
        # Exact floats: a rounding difference only splits a bucket, it never merges two.
        return (self.free_g[i], self.free_c[i], self.free_m[i], self.cap_g[i], self.cap_c[i], self.cap_m[i])

    def _catch_up(self) -> None:
        """Bring the indexes of a large cluster up to date with `changed`."""
        changed = self.changed
        if self._indexed_upto < len(changed):
            for i in sorted(set(changed[self._indexed_upto:])):
                self._rebucket(i)
            self._indexed_upto = len(changed)

    def _rebucket(self, i: int) -> None:
        """Move server i to the bucket of its shape now (large clusters only: `_catch_up`
        calls it). Written out rather than via `_key`."""
        old = self._bucket_of[i]
        new = (self.free_g[i], self.free_c[i], self.free_m[i], self.cap_g[i], self.cap_c[i], self.cap_m[i])
        if old == new:
            return
        if old[0] != new[0]:
            self._level[int(round(old[0]))].discard(i)
            self._level.setdefault(int(round(new[0])), set()).add(i)
        buckets = self._buckets
        bucket = buckets[old]
        if bucket[0] == 1:  # emptied: drop it now, so searches never visit it
            del buckets[old]
        else:
            bucket[0] -= 1
        self._bucket_of[i] = new
        bucket = buckets.get(new)
        if bucket is None:
            buckets[new] = [1, [i]]
        else:
            bucket[0] += 1
            heapq.heappush(bucket[1], i)

    def representatives(self, min_gpus: float = 0.0) -> list[int]:
        """The lowest-indexed server of each distinct (capacity, free) shape with at least
        `min_gpus` free GPUs. Scorers break ties on the index, so scoring only these
        finds the same server as scoring all of them (in any order: the keys differ)."""
        if not self._indexed:
            return [i for i, g in enumerate(self.free_g) if g + EPS >= min_gpus]
        self._catch_up()
        reps = []
        for key, (_, heap) in self._buckets.items():
            if key[0] + EPS < min_gpus:
                continue
            while self._bucket_of[heap[0]] != key:  # lazily drop servers that moved
                heapq.heappop(heap)
            reps.append(heap[0])
        return reps

    def candidates(self, min_gpus: float) -> Iterable[int]:
        """Servers a search for `min_gpus` GPUs must visit, in index order: `representatives`
        on a large cluster; on a small one those with a whole GPU free (kept up to date by
        `reserve` and `release`), for the caller to test; every index for less than one GPU.
        The caller must not keep it across a reservation."""
        if self._indexed:
            return self.representatives(min_gpus)
        return self._open if min_gpus >= 1.0 else range(len(self.ids))

    def by_free_gpus(self, min_gpus: float = 1, descending: bool = False) -> Iterator[int]:
        """Servers with at least `min_gpus` free GPUs, ordered by free GPUs then index.

        A generator over per-level sets, so a caller that stops at the first good server
        pays for one level, not for sorting the whole cluster.
        """
        if not self._indexed:
            order = sorted((i for i, g in enumerate(self.free_g) if g + EPS >= min_gpus),
                           key=lambda i: (-self.free_g[i] if descending else self.free_g[i], i))
            yield from order
            return
        self._catch_up()
        levels = sorted((k for k, members in self._level.items() if members and k + EPS >= min_gpus),
                        reverse=descending)
        for k in levels:
            yield from sorted(self._level[k])

    def reserve(self, job_id: int, placements: tuple[Placement, ...]) -> None:
        if job_id in self.held:
            raise ValueError(f"job {job_id} already holds resources this round")
        for p in placements:
            i = self.index[p.server_id]
            if not self.fits(i, p.gpus, p.cpus, p.mem_gb):
                raise ValueError(f"job {job_id} does not fit on server {p.server_id}")
        for p in placements:
            i = self.index[p.server_id]
            self.free_g[i] -= p.gpus
            self.free_c[i] -= p.cpus
            self.free_m[i] -= p.mem_gb
            self.on_server[i].add(job_id)
            self.changed.append(i)
            if not self._indexed and self.free_g[i] + EPS < 1.0:
                self._close(i)
        self.held[job_id] = placements

    def hold(self, items: Iterable[tuple[int, tuple[Placement, ...]]]) -> None:
        """Reserve a whole plan already known to fit (a round's allocations, to hand out
        what they leave): `reserve` for each item without its fit checks, in one pass."""
        index, free_g, free_c, free_m, on_server, held = (
            self.index, self.free_g, self.free_c, self.free_m, self.on_server, self.held)
        touched: set[int] = set()
        for job_id, placements in items:
            if job_id in held:
                raise ValueError(f"job {job_id} already holds resources this round")
            for p in placements:
                i = index[p.server_id]
                free_g[i] -= p.gpus
                free_c[i] -= p.cpus
                free_m[i] -= p.mem_gb
                on_server[i].add(job_id)
                touched.add(i)
            held[job_id] = placements
        self.changed.extend(sorted(touched))
        if not self._indexed:
            self._open = [i for i in self._open if free_g[i] + EPS >= 1.0]

    def release(self, job_id: int) -> tuple[Placement, ...]:
        placements = self.held.pop(job_id)
        for p in placements:
            i = self.index[p.server_id]
            self.free_g[i] += p.gpus
            self.free_c[i] += p.cpus
            self.free_m[i] += p.mem_gb
            self.on_server[i].discard(job_id)
            self.changed.append(i)
            if not self._indexed and self.free_g[i] + EPS >= 1.0:
                self._reopen(i)
        return placements

    def _close(self, i: int) -> None:
        """Server i has no whole GPU free any more (small clusters)."""
        k = bisect.bisect_left(self._open, i)
        if k < len(self._open) and self._open[k] == i:
            del self._open[k]

    def _reopen(self, i: int) -> None:
        """Server i has a whole GPU free again (small clusters)."""
        k = bisect.bisect_left(self._open, i)
        if k == len(self._open) or self._open[k] != i:
            self._open.insert(k, i)

    def allocations(self) -> dict[int, Allocation]:
        return {jid: Allocation(jid, pl) for jid, pl in self.held.items()}
