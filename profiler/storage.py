"""The storage read bandwidth the MinIO fill needs (§3.1: "a known storage bandwidth").

`measure_read_bandwidth(files, budget_s)` reads the job's own files the way a cache miss reads
them, never through MinIO, after asking the kernel to drop the files' pages from the page cache
(`posix_fadvise(POSIX_FADV_DONTNEED)` per file, after `fdatasync` so that a file written
moments ago has clean pages to drop: unprivileged, and it evicts only these files' pages;
/proc/sys/vm/drop_caches would need root and flush everyone's). Where that is not
possible (no posix_fadvise on the platform, or the call fails) the result says so: the figure
may then be a page-cache read, an overestimate of the disk.

This module is the profiler's only I/O; the clock and the file opener are injectable so the
caller can measure through its own reader (the benchmark's rate-limited one) and tests can run
without time passing.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import BinaryIO, Callable, Sequence

#: Bytes per read call: large enough that the figure is the device's, not the syscalls'.
CHUNK_BYTES = 1 << 20


class ReadBandwidth(float):
    """Bytes/s, a float, that also says how it was measured."""

    bytes_read: int
    elapsed_s: float
    files_read: int
    #: True when every file read had its page cache dropped first.
    page_cache_dropped: bool
    #: Why the page cache could not be dropped ("" when it was).
    note: str

    def __new__(cls, bytes_read: int, elapsed_s: float, files_read: int, dropped: bool, note: str):
        self = super().__new__(cls, bytes_read / elapsed_s if elapsed_s > 0 else 0.0)
        self.bytes_read, self.elapsed_s, self.files_read = bytes_read, elapsed_s, files_read
        self.page_cache_dropped, self.note = dropped, note
        return self


def drop_page_cache(path: Path) -> str:
    """Ask the kernel to drop `path`'s cached pages; "" on success, else why not."""
    if not hasattr(os, "posix_fadvise"):
        return "posix_fadvise is not available on this platform"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return f"cannot open {path}: {exc.strerror}"
    try:
        # DONTNEED drops clean pages only: a file written moments ago (a job that generates
        # or downloads its data at start) is still dirty and would be "read" from memory.
        with contextlib.suppress(OSError):  # a file system without fdatasync: drop what is clean
            os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError as exc:
        return f"posix_fadvise failed on {path}: {exc.strerror}"
    finally:
        os.close(fd)
    return ""


def measure_read_bandwidth(
    files: Sequence[Path],
    budget_s: float,
    *,
    opener: Callable[[Path], BinaryIO] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> ReadBandwidth:
    """Bytes/s reading `files` in order, until all are read or `budget_s` has passed.

    Each file's page cache is dropped just before it is read (the drops are not timed). The
    budget is checked after every chunk, so a slow device overshoots it by one chunk at most.
    `opener` opens a file for reading (default: `open(path, "rb")`). Raises ValueError for an
    empty file list or a budget that is not positive, OSError if a file cannot be read.
    """
    if not files:
        raise ValueError("files: nothing to read")
    if not budget_s > 0:
        raise ValueError(f"budget_s must be positive, got {budget_s!r}")
    open_file = opener or (lambda p: open(p, "rb"))
    total, elapsed, count, notes = 0, 0.0, 0, []
    for path in files:
        why = drop_page_cache(Path(path))
        if why and why not in notes:
            notes.append(why)
        start = clock()
        with open_file(Path(path)) as f:
            while chunk := f.read(CHUNK_BYTES):
                total += len(chunk)
                if elapsed + clock() - start >= budget_s:
                    break
        elapsed += clock() - start
        count += 1
        if elapsed >= budget_s:
            break
    return ReadBandwidth(total, elapsed, count, not notes, "; ".join(notes))
