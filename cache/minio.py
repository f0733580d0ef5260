"""`MinioCache`: DS-Analyzer's MinIO policy in shared memory, one per job attempt.

Policy (what `synergy.scheduler.profiles.minio` assumes): a fixed byte capacity; an item is
admitted on its first access if it fits in what is left, and is never evicted. Once full, the
cached set stays the same every epoch, so an epoch over a dataset of uniformly sized items gets
capacity / dataset hits whatever the access order, and one job's reads never evict another's.

Sharing: every process of the job maps the same /dev/shm file (`segment.py`). Reads take a
shared `fcntl` lock and copy the item's bytes straight out of the mapping (no pickling);
admissions and resizes take the exclusive lock. POSIX record locks are per process and the
kernel drops them when a process dies, so a worker killed mid-admission never wedges the
others. Forked workers reuse the parent's mapping; spawned workers re-attach by path when the
object is unpickled.

Resizing (a RESIZE changes the job's memory): growing raises the capacity and later first
accesses fill it; shrinking drops the most recently admitted items until the rest fit, so the
surviving set is always a prefix of admission order, and gives their pages back to the system.

Clean-up: the creating process owns the segment and unlinks it on `close()`, on leaving a
`with` block (exceptions included) and at interpreter exit. A segment whose owner died without
any of these (kill -9) is removed by the next `create()` on the machine.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import mmap
import os
import struct
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from synergy.cache import segment as seg
from synergy.cache.sizing import DEFAULT_FRACTION, capacity_from_allocation
from synergy.cache.stats import CacheStats

if TYPE_CHECKING:
    from synergy.common.contract import JobEnv

#: Default index size: items the cache can hold at most (32 B each, sparse until used).
DEFAULT_MAX_ITEMS = 1 << 18
#: Stats slots (one per process that ever reads; DataLoader workers restart every epoch
#: unless persistent). Processes beyond this share one overflow slot under the lock.
DEFAULT_MAX_SLOTS = 1024
#: A segment without a valid header this old is a creator that died mid-create.
_HALF_CREATED_S = 60.0


def _check_size(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def remove_stale_segments(shm_dir: str = seg.SHM_DIR) -> list[str]:
    """Unlink every cache segment in `shm_dir` whose owner process is gone; return their paths.

    A live owner's segment is never touched (owner = pid + start time, so a reused pid does not
    count as alive)."""
    removed: list[str] = []
    for path in sorted(Path(shm_dir).glob(seg.PREFIX + "*")):
        try:
            with open(path, "rb") as f:
                head = f.read(seg.HEADER.size)
            try:
                header = seg.Header.read(head)
            except (ValueError, struct.error):
                if time.time() - path.stat().st_mtime < _HALF_CREATED_S:
                    continue  # being created right now
                header = None
            if header is None or not seg.owner_alive(header):
                path.unlink()
                removed.append(str(path))
        except (FileNotFoundError, PermissionError):
            continue  # gone meanwhile, or another user's (never ours to judge)
    return removed


@dataclass
class _Counters:
    hits: int = 0
    hit_bytes: int = 0
    misses: int = 0
    miss_bytes: int = 0


class MinioCache:
    """A job's MinIO cache. Create it once in the main process (`create` or `for_job`), hand it
    to the dataset; DataLoader workers share it. `get(key, load)` is the one read path."""

    def __init__(self, path: str, *, _owner: bool = False) -> None:
        """Attach to an existing segment (use `create`, `for_job` or `attach`)."""
        self.path = path
        self._owner = _owner
        self._fd = os.open(path, os.O_RDWR)
        self._mm: mmap.mmap | None = None
        self._mapped = 0
        self._closed = False
        #: How `capacity_for` turns a memory allocation into bytes: `for_job` records its own
        #: arguments here, so a RESIZE sizes the cache the way its creation did.
        self.fraction = DEFAULT_FRACTION
        self.process_mem_gb = 0.0
        self._reset_process_state()
        with self._locked(exclusive=False):
            pass  # maps the segment and validates its header
        if _owner:
            atexit.register(self.close)

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        capacity_bytes: int,
        *,
        job_id: int | None = None,
        attempt: int = 0,
        tag: str = "",
        cluster: str = "",
        shm_dir: str = seg.SHM_DIR,
        max_items: int = DEFAULT_MAX_ITEMS,
        max_slots: int = DEFAULT_MAX_SLOTS,
    ) -> MinioCache:
        """A new, empty cache owned by this process, named for (job_id, attempt[, cluster][, tag]).

        `capacity_bytes` 0 is allowed (every read misses, the model's hit rate 0); negative or
        non-int raises. Stale segments of crashed jobs are removed first; a segment of the same
        name with a live owner raises FileExistsError."""
        _check_size("capacity_bytes", capacity_bytes, 0)
        _check_size("max_items", max_items, 1)
        _check_size("max_slots", max_slots, 1)
        remove_stale_segments(shm_dir)
        path = os.path.join(shm_dir, seg.segment_name(job_id, attempt, tag, cluster))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, "cache segment is in use by a live process", path) from None
        try:
            start = seg.process_start_time(os.getpid())
            header = seg.Header(
                owner_pid=os.getpid(), owner_start=start if start is not None else 0.0,
                capacity=capacity_bytes, region_bytes=seg.page_ceil(max(capacity_bytes, 1)),
                used=0, n_entries=0, generation=0, max_items=max_items, max_slots=max_slots, rejected=0,
            )
            os.ftruncate(fd, header.data_offset + header.region_bytes)
            with mmap.mmap(fd, seg.HEADER_BYTES) as mm:
                header.write(mm)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        try:
            return cls(path, _owner=True)
        except BaseException:
            os.unlink(path)
            raise

    @classmethod
    def for_job(
        cls,
        env: JobEnv | None = None,
        fraction: float = DEFAULT_FRACTION,
        process_mem_gb: float = 0.0,
        **kwargs: object,
    ) -> MinioCache:
        """The cache of the job this process belongs to, sized from its memory allocation.

        `env` is a `synergy.common.contract.JobEnv` (read from the environment when None):
        capacity = `capacity_from_allocation(env.alloc_mem_gb, fraction, process_mem_gb)`, named
        by the job id, its attempt and its daemon (`segment.cluster_tag`)."""
        from synergy.common.contract import JobEnv  # the agent's contract: the one place it lives

        job = env if env is not None else JobEnv.from_env()
        capacity = capacity_from_allocation(job.alloc_mem_gb, fraction, process_mem_gb)
        cache = cls.create(capacity, job_id=job.job_id, attempt=job.attempt,  # type: ignore[arg-type]
                           cluster=seg.cluster_tag(job.daemon_address), **kwargs)
        cache.fraction, cache.process_mem_gb = fraction, process_mem_gb
        return cache

    def capacity_for(self, alloc_mem_gb: float) -> int:
        """The capacity a memory allocation of `alloc_mem_gb` affords this cache (the sizing
        it was created with: `for_job`'s fraction and process memory, else the defaults)."""
        return capacity_from_allocation(alloc_mem_gb, self.fraction, self.process_mem_gb)

    @classmethod
    def attach(cls, path: str) -> MinioCache:
        """Another handle on an existing segment (not the owner: closing it unlinks nothing)."""
        return cls(path)

    # ---- pickling: spawned DataLoader workers re-attach by path ---------------------------

    def __getstate__(self) -> dict[str, object]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(str(state["path"]))  # type: ignore[misc]

    # ---- the read path ------------------------------------------------------------------

    def get(self, key: object, load: Callable[[], bytes] | None = None) -> bytes | None:
        """The item's bytes: from memory on a hit; on a miss from `load()` (then admitted if it
        fits), or None without `load`. Counts one hit or one miss either way.

        An item that does not fit (cache full, larger than the capacity) is simply not
        admitted: the read still succeeds from `load`, and `stats().rejected` counts it."""
        digest = seg.key_digest(key)
        with self._locked(exclusive=False):
            entry = self._index.get(digest)
            data = None
            if entry is not None:
                start = self._data_offset + entry[0]
                data = self._mm[start : start + entry[1]]  # type: ignore[index]
        if data is not None:
            self._count(hits=1, hit_bytes=len(data))
            return data
        if load is None:
            self._count(misses=1)
            return None
        loaded = load()
        if not isinstance(loaded, (bytes, bytearray, memoryview)):
            raise TypeError(f"load() must return bytes, got {type(loaded).__name__}")
        loaded = bytes(loaded)
        self._admit(digest, loaded)
        self._count(misses=1, miss_bytes=len(loaded))
        return loaded

    def put(self, key: object, data: bytes) -> bool:
        """Admit `data` under `key` if it is not cached and fits; True if it is cached after."""
        return self._admit(seg.key_digest(key), bytes(data))

    def __contains__(self, key: object) -> bool:
        digest = seg.key_digest(key)
        with self._locked(exclusive=False):
            return digest in self._index

    # ---- resize -------------------------------------------------------------------------

    def resize(self, capacity_bytes: int) -> int:
        """Set a new capacity (after a RESIZE changed the job's memory); returns the number of
        items dropped. Growing keeps every item and admits more on later first accesses;
        shrinking drops the most recently admitted items until the rest fit, so what survives
        is a prefix of admission order, and returns their memory to the system."""
        _check_size("capacity_bytes", capacity_bytes, 0)
        with self._locked(exclusive=True):
            h = self._header()
            region = h.region_bytes
            if capacity_bytes > region:
                region = seg.page_ceil(capacity_bytes)
                os.ftruncate(self._fd, h.data_offset + region)
            n, used, gen = h.n_entries, h.used, h.generation
            if used > capacity_bytes:
                while n > 0 and sum(self._entry(h, n - 1)[1:]) > capacity_bytes:
                    n -= 1
                new_used = sum(self._entry(h, n - 1)[1:]) if n else 0
                self._release(h.data_offset, new_used, used)
                used, gen = new_used, gen + 1
            dropped = h.n_entries - n
            _replace_header(self._mm, h, capacity=capacity_bytes, region_bytes=region,
                            used=used, n_entries=n, generation=gen)
            self._sync()
        return dropped

    # ---- statistics ---------------------------------------------------------------------

    def stats(self) -> CacheStats:
        """The job's totals: every process's counters (live or exited) plus the current fill."""
        with self._locked(exclusive=False):
            h = self._header()
            totals = list(seg.COUNTERS.unpack_from(self._mm, seg.OVERFLOW_OFFSET))  # type: ignore[arg-type]
            for i in range(h.max_slots):
                pid, *counts = seg.SLOT.unpack_from(self._mm, h.slots_offset + i * seg.SLOT.size)  # type: ignore[arg-type]
                if pid == 0:
                    break  # slots are claimed in order
                totals = [a + b for a, b in zip(totals, counts)]
        return CacheStats(hits=totals[0], hit_bytes=totals[1], misses=totals[2], miss_bytes=totals[3],
                          items=h.n_entries, used_bytes=h.used, capacity_bytes=h.capacity, rejected=h.rejected)

    def local_stats(self) -> CacheStats:
        """This process's own reads (the fill fields are the cache's, as in `stats`)."""
        total = self.stats()
        c = self._local
        return CacheStats(hits=c.hits, hit_bytes=c.hit_bytes, misses=c.misses, miss_bytes=c.miss_bytes,
                          items=total.items, used_bytes=total.used_bytes,
                          capacity_bytes=total.capacity_bytes, rejected=total.rejected)

    def admission_order(self) -> list[bytes]:
        """Digests of the cached items in admission order (for tests and diagnostics)."""
        with self._locked(exclusive=False):
            h = self._header()
            return [self._entry(h, i)[0] for i in range(h.n_entries)]

    # ---- life cycle ---------------------------------------------------------------------

    @property
    def owner(self) -> bool:
        """True in the process that created the segment (and will unlink it)."""
        return self._owner and self._pid == os.getpid()

    def close(self) -> None:
        """Unmap; the owner also unlinks the segment. Idempotent; workers' handles never unlink."""
        if self._closed:
            return
        self._closed = True
        if self._owner and self._pid == os.getpid():
            atexit.unregister(self.close)
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass
        os.close(self._fd)

    def __enter__(self) -> MinioCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MinioCache({self.path!r}, owner={self.owner})"

    # ---- internals ----------------------------------------------------------------------

    def _reset_process_state(self) -> None:
        """Per-process state: rebuilt in a forked child (new pid) before its first use."""
        self._pid = os.getpid()
        self._tlock = threading.Lock()
        self._local = _Counters()
        self._slot: int | None = None  # offset of this process's stats slot, -1 = overflow
        self._index: dict[bytes, tuple[int, int]] = {}
        self._seen = 0
        self._generation = -1

    @contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        if self._closed:
            raise ValueError(f"{self!r} is closed")
        if self._pid != os.getpid():
            self._reset_process_state()  # forked: own thread lock, own slot, own view
        with self._tlock:
            fcntl.lockf(self._fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                self._map()
                self._sync()
                yield
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def _map(self) -> None:
        """(Re)map when the segment grew (a resize in any process) or on first use."""
        size = os.fstat(self._fd).st_size
        if self._mm is not None and size == self._mapped:
            return
        if self._mm is None:
            head = os.pread(self._fd, seg.HEADER.size, 0)
            seg.Header.read(head)  # raises on a file that is not a cache segment
        else:
            self._mm.close()
        self._mm = mmap.mmap(self._fd, size)
        self._mapped = size
        self._data_offset = self._header().data_offset

    def _header(self) -> seg.Header:
        return seg.Header.read(self._mm)  # type: ignore[arg-type]

    def _entry(self, h: seg.Header, i: int) -> tuple[bytes, int, int]:
        return seg.ENTRY.unpack_from(self._mm, h.index_offset + i * seg.ENTRY.size)  # type: ignore[arg-type,return-value]

    def _sync(self) -> None:
        """Bring this process's key -> (offset, length) view up to date (lock held)."""
        h = self._header()
        if h.generation != self._generation:
            self._index, self._seen, self._generation = {}, 0, h.generation
        for i in range(self._seen, h.n_entries):
            digest, offset, length = self._entry(h, i)
            self._index[digest] = (offset, length)
        self._seen = h.n_entries

    def _admit(self, digest: bytes, data: bytes) -> bool:
        with self._locked(exclusive=True):
            if digest in self._index:
                return True  # another worker admitted it meanwhile
            h = self._header()
            if h.n_entries >= h.max_items or h.used + len(data) > h.capacity:
                _replace_header(self._mm, h, rejected=h.rejected + 1)
                return False
            start = self._data_offset + h.used
            self._mm[start : start + len(data)] = data  # type: ignore[index]
            seg.ENTRY.pack_into(self._mm, h.index_offset + h.n_entries * seg.ENTRY.size,  # type: ignore[arg-type]
                                digest, h.used, len(data))
            _replace_header(self._mm, h, used=h.used + len(data), n_entries=h.n_entries + 1)
            self._sync()
        return True

    def _release(self, data_offset: int, keep: int, used: int) -> None:
        """Give the pages of dropped items back (tmpfs frees them on MADV_REMOVE)."""
        start = seg.page_ceil(data_offset + keep)
        end = seg.page_ceil(data_offset + used)
        if end > start and hasattr(mmap, "MADV_REMOVE"):
            self._mm.madvise(mmap.MADV_REMOVE, start, end - start)  # type: ignore[union-attr]

    def _count(self, hits: int = 0, hit_bytes: int = 0, misses: int = 0, miss_bytes: int = 0) -> None:
        with self._tlock:
            c = self._local
            c.hits += hits
            c.hit_bytes += hit_bytes
            c.misses += misses
            c.miss_bytes += miss_bytes
            slot = self._slot
        if slot is None:
            slot = self._claim_slot()
            if slot == -2:
                return  # the claim found no free slot and already added these counts
        if slot >= 0:
            with self._tlock:  # only this process writes its slot: no file lock needed
                seg.SLOT.pack_into(self._mm, slot, self._pid, c.hits, c.hit_bytes, c.misses, c.miss_bytes)  # type: ignore[arg-type]
        else:
            with self._locked(exclusive=True):
                off = seg.OVERFLOW_OFFSET
                old = seg.COUNTERS.unpack_from(self._mm, off)  # type: ignore[arg-type]
                seg.COUNTERS.pack_into(self._mm, off, *(a + b for a, b in zip(old, (hits, hit_bytes, misses, miss_bytes))))  # type: ignore[arg-type]

    def _claim_slot(self) -> int:
        with self._locked(exclusive=True):
            h = self._header()
            for i in range(h.max_slots):
                off = h.slots_offset + i * seg.SLOT.size
                if seg.SLOT.unpack_from(self._mm, off)[0] == 0:  # type: ignore[arg-type]
                    seg.SLOT.pack_into(self._mm, off, self._pid, 0, 0, 0, 0)  # type: ignore[arg-type]
                    self._slot = off
                    break
            else:
                # Full: this process's counters so far go to the overflow slot, later ones too.
                c = self._local
                old = seg.COUNTERS.unpack_from(self._mm, seg.OVERFLOW_OFFSET)  # type: ignore[arg-type]
                seg.COUNTERS.pack_into(self._mm, seg.OVERFLOW_OFFSET,  # type: ignore[arg-type]
                                       *(a + b for a, b in zip(old, (c.hits, c.hit_bytes, c.misses, c.miss_bytes))))
                self._slot = -1
                return -2  # already counted
        return self._slot


def _replace_header(mm: mmap.mmap | None, h: seg.Header, **changes: int) -> None:
    replace(h, **changes).write(mm)  # type: ignore[arg-type]
