"""The state directory: lock, tokens and address files next to the SQLite store.

Layout (all created on first start; secrets are mode 0600, the directory 0700)::

    STATE_DIR/synergyd.sqlite   jobs, nodes, settings (WAL)
    STATE_DIR/synergyd.lock     flock held while a daemon runs (refuses a second one)
    STATE_DIR/cluster.token     agents present it
    STATE_DIR/admin.token       the CLI presents it
    STATE_DIR/address           host:port of the gRPC server (written after binding)
    STATE_DIR/metrics_address   host:port of /metrics and /healthz (when enabled)
    STATE_DIR/agent_address     host:port of the mutual-TLS agent port (with --tls-client-ca)

The CLI, run on the same machine, finds the daemon and its admin token here; the names are
exported as constants for it.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path

LOCK_FILE = "synergyd.lock"
CLUSTER_TOKEN_FILE = "cluster.token"
ADMIN_TOKEN_FILE = "admin.token"
ADDRESS_FILE = "address"
METRICS_ADDRESS_FILE = "metrics_address"
AGENT_ADDRESS_FILE = "agent_address"


def default_state_dir() -> Path:
    env = os.environ.get("SYNERGY_STATE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "synergy"


class StateDirError(RuntimeError):
    pass


class StateDir:
    """Owns the directory for the life of one daemon process."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None

    def open(self) -> None:
        """Create (0700) and lock; StateDirError when another synergyd holds it."""
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StateDirError(f"--state-dir {self.path}: cannot create ({exc.strerror})") from None
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateDirError(f"--state-dir {self.path}: another synergyd (pid {holder}) is running on it") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def close(self) -> None:
        """Remove the address files and release the lock (only if this process holds it)."""
        if self._lock_fd is None:
            return
        for name in (ADDRESS_FILE, METRICS_ADDRESS_FILE, AGENT_ADDRESS_FILE):
            (self.path / name).unlink(missing_ok=True)
        os.close(self._lock_fd)  # releases the flock
        self._lock_fd = None

    def token(self, override: Path | None, default_name: str) -> str:
        """Read the token file, generating it (0600) when it is the default and missing."""
        path = override if override is not None else self.path / default_name
        if not path.exists():
            if override is not None:
                raise StateDirError(f"token file {path} does not exist")
            write_secret(path, secrets.token_urlsafe(32))
        value = path.read_text().strip()
        if len(value) < 16:
            raise StateDirError(f"token file {path} holds fewer than 16 characters")
        return value

    def write_address(self, name: str, address: str) -> None:
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(address + "\n")
        os.replace(tmp, self.path / name)


def write_secret(path: Path, value: str) -> None:
    """Create `path` with mode 0600 from the start (never world-readable, not even briefly)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
