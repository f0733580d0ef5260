"""The shared-memory layout of one MinIO cache: a single file in /dev/shm, mapped by every
process of the job (the main process and all DataLoader workers, forked or spawned).

::

    [header 128 B][stats slots: max_slots x 40 B][index: max_items x 32 B][data region]

* header: magic, the owner's pid and start time (to tell a live segment from a crashed job's),
  capacity, data region size, bytes used, entry count, generation (bumped when a shrink drops
  entries, so every process rebuilds its local view), limits, rejected count and an overflow
  stats slot;
* stats slot: (pid, hits, hit_bytes, misses, miss_bytes), written only by the process that owns
  it, so updating counters needs no lock and the job total is a sum;
* index entry i: (16-byte BLAKE2b digest of the key, data offset, length), in admission order;
  data is bump-allocated, so entry i's bytes end where entry i+1's begin.

tmpfs files are sparse: unused index and data pages cost no memory until written.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
from dataclasses import dataclass

MAGIC = b"SYNCACH1"
#: Every segment's file name starts with this; stale-segment clean-up looks at no other file.
PREFIX = "synergy-cache-"
SHM_DIR = "/dev/shm"

HEADER = struct.Struct("<8sqdqqqqqqqq")  # magic, pid, start, capacity, region, used, n, gen, max_items, max_slots, rejected
HEADER_BYTES = 128
OVERFLOW_OFFSET = 96  # 4 counters after the header fields (HEADER.size == 96)
SLOT = struct.Struct("<qqqqq")  # pid, hits, hit_bytes, misses, miss_bytes
COUNTERS = struct.Struct("<qqqq")  # hits, hit_bytes, misses, miss_bytes
ENTRY = struct.Struct("<16sqq")  # digest, offset, length
PAGE = mmap.PAGESIZE
assert HEADER.size <= OVERFLOW_OFFSET and OVERFLOW_OFFSET + COUNTERS.size <= HEADER_BYTES


@dataclass(frozen=True)
class Header:
    """The header fields, as read under the segment lock."""

    owner_pid: int
    owner_start: float
    capacity: int
    region_bytes: int
    used: int
    n_entries: int
    generation: int
    max_items: int
    max_slots: int
    rejected: int

    @classmethod
    def read(cls, buf: mmap.mmap | bytes) -> Header:
        magic, *rest = HEADER.unpack_from(buf, 0)
        if magic != MAGIC:
            raise ValueError(f"not a synergy cache segment (magic {magic!r})")
        return cls(*rest)

    def write(self, buf: mmap.mmap) -> None:
        HEADER.pack_into(
            buf, 0, MAGIC, self.owner_pid, self.owner_start, self.capacity, self.region_bytes,
            self.used, self.n_entries, self.generation, self.max_items, self.max_slots, self.rejected,
        )

    @property
    def slots_offset(self) -> int:
        return HEADER_BYTES

    @property
    def index_offset(self) -> int:
        return HEADER_BYTES + self.max_slots * SLOT.size

    @property
    def data_offset(self) -> int:
        return page_ceil(self.index_offset + self.max_items * ENTRY.size)


def page_ceil(n: int) -> int:
    return -(-n // PAGE) * PAGE


def segment_name(job_id: int | None, attempt: int = 0, tag: str = "", cluster: str = "") -> str:
    """`synergy-cache-j<job>-a<attempt>[-d<cluster>][-<tag>]`; without a job id (a standalone
    run) the process id stands in for it. One name per job attempt, so a relaunch never attaches
    to a crashed attempt's half-written segment. `cluster` tells apart two daemons' jobs of the
    same id on one machine (two clusters, or parallel tests: both had a live job 1, attempt 1)."""
    who = f"j{job_id}" if job_id is not None else f"p{os.getpid()}"
    for name, value in (("tag", tag), ("cluster", cluster)):
        if value and not value.replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"{name} must be letters, digits, '_' or '.', got {value!r}")
    return f"{PREFIX}{who}-a{attempt}" + (f"-d{cluster}" if cluster else "") + (f"-{tag}" if tag else "")


def cluster_tag(daemon_address: str) -> str:
    """A short, stable tag for the daemon a job belongs to (its address hashed)."""
    return hashlib.sha256(daemon_address.encode()).hexdigest()[:8]


def key_digest(key: object) -> bytes:
    """A 16-byte digest of a str, bytes, int or path key (typed, so 1 and "1" differ)."""
    if isinstance(key, os.PathLike):
        key = os.fspath(key)
    if isinstance(key, str):
        raw = b"s" + key.encode("utf-8", "surrogateescape")
    elif isinstance(key, (bytes, bytearray, memoryview)):
        raw = b"b" + bytes(key)
    elif isinstance(key, int) and not isinstance(key, bool):
        raw = b"i" + str(key).encode()
    else:
        raise TypeError(f"cache key must be str, bytes, int or a path, got {type(key).__name__}")
    return hashlib.blake2b(raw, digest_size=16).digest()


def process_start_time(pid: int) -> float | None:
    """The process's start time (clock ticks since boot, from /proc), None if it is gone.

    With the pid it identifies a process across pid reuse."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # Field 22 (starttime); the command name in field 2 may contain spaces, so split after ')'.
    return float(stat[stat.rindex(b")") + 2 :].split()[19])


def owner_alive(header: Header) -> bool:
    return header.owner_pid > 0 and process_start_time(header.owner_pid) == header.owner_start
