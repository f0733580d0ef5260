"""Atomic writes and lock files: how synergyd, the CLI, the agent and a job keep a file whole.

Stdlib only. synergyd and the CLI reach these through `synergy.scheduler.statedir` (which
words their failures for the state dir); the agent uses them for its work dir, and the
iterator's checkpoints use `fsync_dir`.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path

#: Temp files of `write_atomically` start with this (a crash may leave one; never the only copy).
TEMP_PREFIX = ".tmp-"


class LockError(RuntimeError):
    """A lock file cannot be opened; the message is one line naming the flag and the file."""


class Locked(LockError):
    """Another live process holds the lock."""


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, mode: int = 0o600, sync_dir: bool = True) -> None:
    """Write `path` whole or not at all: a temp file (created with `mode`), fsync, rename, and
    (`sync_dir`) fsync of the directory.

    A crash or a full disk leaves the old file (or none), never a partial one. Raises OSError;
    the temp file is removed on failure. Without `sync_dir` the switch is atomic for a reader
    after a process crash but not durable across a power loss (the agent's state file: its
    tasks do not outlive the machine, and the fsync would double the cost of every launch).
    """
    path = Path(path)
    tmp = path.parent / f"{TEMP_PREFIX}{path.name}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def acquire_lock(directory: Path, name: str, owner: str, flag: str) -> int:
    """flock DIRECTORY/`name` and write our pid into it; returns the fd (close it to release).

    `owner` names the program in the refusal ("another synergy-agent (pid 12) is running on
    it"), `flag` the option that chose the directory. Raises Locked or LockError."""
    try:
        fd = os.open(Path(directory) / name, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise LockError(f"{flag} {directory}: cannot open {name} ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise Locked(f"{flag} {directory}: another {owner} (pid {holder}) is running on it") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:  # a full disk must not stop a start: the pid is only informative
        pass
    return fd
