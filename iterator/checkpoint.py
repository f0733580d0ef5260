"""Atomic checkpoint files: one directory per step, one file per rank.

Layout under the contract's checkpoint dir: ``step-000000123/rank0.pt`` (rank 0: the shared
``state`` plus its position) and ``rank<r>.pt`` (other ranks: their position only). Each file
is written to a temp name, fsynced, renamed and the directory fsynced, so a process killed
mid-write (kill -9) leaves at most a stray ``.tmp`` file: every file a reader can see is
complete, and the previous step's directory is never touched. The reported path is the step
directory; rank 0's file is what makes it a checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read; the message is one line for the job's log."""


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step-{step:09d}"


def rank_file(ckpt: str | Path, rank: int) -> Path:
    return Path(ckpt) / f"rank{rank}.pt"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_save(obj: Any, path: Path) -> int:
    """Write `obj` to `path` atomically (temp, fsync, rename, fsync dir); returns bytes written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _fsync_dir(path.parent.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        return size
    except OSError as exc:
        raise CheckpointError(f"cannot write checkpoint {path}: {exc.strerror or exc}") from None


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


def check_writable(root: str | Path) -> None:
    """Fail at start, not at the first stop, when the checkpoint dir cannot be written."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise CheckpointError(f"checkpoint dir {root} is not writable: {exc.strerror or exc}") from None
