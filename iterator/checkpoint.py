"""Atomic checkpoint files: one directory per step, one file per rank, the last K kept.

Layout under the contract's checkpoint dir: ``step-000000123/rank0.pt`` (rank 0: the shared
``state`` plus its position) and ``rank<r>.pt`` (other ranks: their position only). Each file
is written to a temp name, fsynced, renamed and the directory fsynced, so a process killed
mid-write (kill -9) leaves at most a stray ``.tmp`` file: every file a reader can see is
complete, and the previous step's directory is never touched. The reported path is the step
directory; a step directory holding every rank's file is *complete*. Any failed write
(a full disk, a read-only fs, torch's own RuntimeError from its zip writer) removes its temp
file and raises `CheckpointError`, whose `kind` says which.

Write speed: torch's zip writer computes a CRC32 of every record by default, which is where
most of a large save's time went (340-360 MB/s against dd's 1.5-2 GB/s); the files here are
protected by temp-fsync-rename instead, so CRC32 is off for our saves (`torch.load` reads them
as usual). `retain` keeps the newest K complete checkpoints and deletes older step dirs.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.utils.serialization as torch_serialization

from synergy.common.files import fsync_dir

#: Kinds of `CheckpointError` (the words describe shows).
FULL = "checkpoint dir full"
READ_ONLY = "checkpoint dir read-only"
OTHER = "checkpoint write failed"

_STEP_DIR = re.compile(r"^step-(\d{9,})$")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read; the message is one line for the job's log."""

    def __init__(self, message: str, kind: str = OTHER) -> None:
        super().__init__(message)
        self.kind = kind


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step-{step:09d}"


def rank_file(ckpt: str | Path, rank: int) -> Path:
    return Path(ckpt) / f"rank{rank}.pt"


def _kind(exc: BaseException | None, directory: Path) -> str:
    """FULL / READ_ONLY / OTHER for a failed write (called before the temp file is removed).
    torch's zip writer reports ENOSPC as a RuntimeError ("unexpected pos"), hiding the OSError,
    so a full disk is also recognised by its free space (under 1 MiB left)."""
    while exc is not None:
        err = getattr(exc, "errno", None)
        if err in (errno.ENOSPC, errno.EDQUOT):
            return FULL
        if err == errno.EROFS:
            return READ_ONLY
        exc = exc.__cause__ or exc.__context__
    try:
        return FULL if shutil.disk_usage(directory).free < (1 << 20) else OTHER
    except OSError:
        return OTHER


def atomic_save(obj: Any, path: Path) -> int:
    """Write `obj` to `path` atomically (temp, fsync, rename, fsync dir); returns bytes written.
    On any failure the temp file is removed and CheckpointError raised."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fsync_dir(path.parent.parent)
        # (the setting is process-wide while it is patched: a save the script makes at the same
        # moment in another thread skips CRC32 too, which torch.load does not need)
        with open(tmp, "wb") as f, torch_serialization.config.patch({"save.compute_crc32": False}):
            torch.save(obj, f)
            f.flush()
            size = f.tell()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
        return size
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError for I/O errors too
        kind = _kind(exc, path.parent if path.parent.exists() else path.parent.parent)
        try:
            tmp.unlink(missing_ok=True)
            path.parent.rmdir()  # a step dir this write left empty (another rank's file: kept)
        except OSError:
            pass
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else " ".join(str(exc).split())[:200]
        raise CheckpointError(f"{kind}: cannot write checkpoint {path}: {detail}", kind) from None


def load(ckpt: str | Path, rank: int) -> dict[str, Any]:
    """Rank `rank`'s file of a checkpoint, falling back to rank 0's (the world size may have grown)."""
    ckpt = Path(ckpt)
    path = rank_file(ckpt, rank)
    if not path.exists():
        path = rank_file(ckpt, 0)
    try:
        data = torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise CheckpointError(f"cannot resume: checkpoint {path} does not exist") from None
    except Exception as exc:  # noqa: BLE001 - pickle/zip errors have many types; all mean "corrupt"
        raise CheckpointError(f"cannot resume: checkpoint {path} is corrupt ({type(exc).__name__})") from None
    if not isinstance(data, dict) or "position" not in data:
        raise CheckpointError(f"cannot resume: checkpoint {path} is not a SynergyIterator checkpoint")
    return data


def steps(root: str | Path) -> list[int]:
    """Steps of the step dirs under `root`, oldest first (complete or not)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in map(_STEP_DIR.match, names) if m)


def complete(ckpt: str | Path, world_size: int) -> bool:
    """Every rank's file is there (each one is whole: they appear only by rename)."""
    return all(rank_file(ckpt, r).exists() for r in range(max(world_size, 1)))


def retain(root: str | Path, keep: int, world_size: int, newest_reported: int) -> list[int]:
    """Delete step dirs older than the `keep` newest complete ones, counting only complete
    checkpoints up to `newest_reported` (the newest one the daemon has been told of), so the
    job is never left without a loadable, reported checkpoint. Returns the steps deleted."""
    done = [s for s in steps(root) if s <= newest_reported and complete(step_dir(root, s), world_size)]
    if keep < 1 or len(done) <= keep:
        return []
    oldest_kept = done[-keep]
    gone = [s for s in steps(root) if s < oldest_kept]
    for s in gone:
        shutil.rmtree(step_dir(root, s), ignore_errors=True)
    return gone


def check_writable(root: str | Path) -> None:
    """Fail at start, not at the first stop, when the checkpoint dir cannot be written."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        kind = READ_ONLY if exc.errno == errno.EROFS else FULL if exc.errno == errno.ENOSPC else OTHER
        raise CheckpointError(f"checkpoint dir {root} is not writable: {exc.strerror or exc}", kind) from None
