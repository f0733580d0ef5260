"""The state directory: its layout, and handling it safely from synergyd and the synergy CLI.

Layout (created on first start; secrets are mode 0600, the directory 0700, or 0711 with the
Unix socket in it: others may then reach the socket by name, never list or read the dir)::

    STATE_DIR/synergyd.sqlite   jobs, nodes, settings (WAL; holds job tokens)
    STATE_DIR/synergyd.lock     flock held while a daemon runs (or a restore)
    STATE_DIR/cluster.token     agents present it
    STATE_DIR/admin.token       the CLI presents it
    STATE_DIR/address           host:port of the gRPC server (written after binding)
    STATE_DIR/metrics_address   host:port of /metrics and /healthz (when enabled)
    STATE_DIR/agent_address     host:port of the mutual-TLS agent port (with --tls-client-ca)
    STATE_DIR/synergyd.sock     the local Unix socket (users of this machine, no token; mode 0666)

Both shells import this module and nothing of each other: the daemon to own the directory
(lock, tokens, permissions, the start-up integrity check), the CLI to find the daemon and
its token, and to check, back up and restore the database offline. It needs the standard
library only, so the CLI never pulls in the daemon.

Every failure is a `StateDirError` whose message is one line naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from synergy.common import files
# The state dir's names for them (temp files of atomic writes and backups start with TEMP_PREFIX;
# stale ones are removed at start).
from synergy.common.files import TEMP_PREFIX, fsync_dir, write_atomically  # noqa: F401

DB_FILE = "synergyd.sqlite"
LOCK_FILE = "synergyd.lock"
CLUSTER_TOKEN_FILE = "cluster.token"
ADMIN_TOKEN_FILE = "admin.token"
ADDRESS_FILE = "address"
METRICS_ADDRESS_FILE = "metrics_address"
DASHBOARD_ADDRESS_FILE = "dashboard_address"
AGENT_ADDRESS_FILE = "agent_address"
SOCKET_FILE = "synergyd.sock"
#: The ports the last run picked for `--port 0` / `--agent-port 0` ("PORT AGENT_PORT"); kept
#: after exit (the address files are not), so a restart binds them again when free.
PORTS_FILE = "ports"
TOKEN_FILES = (ADMIN_TOKEN_FILE, CLUSTER_TOKEN_FILE)
#: SQLite's side files of a WAL database: `synergyd.sqlite-wal`, `synergyd.sqlite-shm`.
DB_SIDE_SUFFIXES = ("-wal", "-shm")
#: Files that hold secrets (the database holds every job's token): owner-only.
SECRET_FILES = (ADMIN_TOKEN_FILE, CLUSTER_TOKEN_FILE, DB_FILE, *(DB_FILE + s for s in DB_SIDE_SUFFIXES))
#: The previous database, kept by a restore (with its WAL, so it still opens).
REPLACED_DB_FILE = DB_FILE + ".before-restore"

MIN_TOKEN_CHARS = 16
#: What makes a file a synergyd database: these tables, and this schema version in `settings`.
SCHEMA_VERSION = "1"
TABLES = ("jobs", "nodes", "settings", "progress")


def default_state_dir() -> Path:
    env = os.environ.get("SYNERGY_STATE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "synergy"


class StateDirError(RuntimeError):
    """The state dir cannot be used as it is; the message is one line with the fix."""


class StateDirLocked(StateDirError):
    """Another process (a running synergyd, or a restore) holds the state dir's lock."""


class DatabaseDamaged(StateDirError):
    """The database is unreadable, fails its integrity check, is not synergyd's, or is missing."""


class WrongSchemaVersion(StateDirError):
    """A synergyd database of a schema version this synergy does not read."""


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


# -- the lock ---------------------------------------------------------------------------------------
def acquire_lock(state_dir: Path, name: str = LOCK_FILE, owner: str = "synergyd", flag: str = "--state-dir") -> int:
    """flock DIR/`name` and write our pid into it; returns the fd (close it to release).

    The lock itself is `synergy.common.files.acquire_lock` (the agent locks its work dir
    with it); here its failures are the state dir's errors."""
    try:
        return files.acquire_lock(state_dir, name, owner, flag)
    except files.Locked as exc:
        raise StateDirLocked(str(exc)) from None
    except files.LockError as exc:
        raise StateDirError(str(exc)) from None


@contextlib.contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """Hold the state dir's lock for an offline operation (restore): no daemon starts meanwhile."""
    fd = acquire_lock(state_dir)
    try:
        yield
    finally:
        os.close(fd)


# -- permissions ------------------------------------------------------------------------------------
def tighten_permissions(state_dir: Path, dir_mode: int = 0o700) -> list[str]:
    """Make the dir `dir_mode` (0700, or 0711 to let others reach the Unix socket in it) and its
    secret files 0600, as ssh insists for keys.

    Returns one message per change (the caller logs them as warnings: a looser mode means the
    secrets may already have been read). Raises StateDirError when a mode cannot be changed
    (the files belong to someone else), since running on readable secrets is unsafe.
    """
    changed: list[str] = []
    targets = [(Path(state_dir), dir_mode)] + [(Path(state_dir) / n, 0o600) for n in SECRET_FILES]
    for path, wanted in targets:
        try:
            mode = stat.S_IMODE(path.lstat().st_mode)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StateDirError(f"cannot inspect {path} ({_why(exc)})") from None
        if mode & 0o077 == wanted & 0o077:
            continue
        looser = mode & 0o077 & ~wanted  # else tighter than wanted: a 0700 dir that now holds the socket
        try:
            os.chmod(path, wanted)
        except OSError as exc:
            raise StateDirError(
                f"{path} has mode {mode:04o} (readable by others) and cannot be tightened ({_why(exc)}); "
                f"run chmod {wanted:o} {path} as its owner"
            ) from None
        if looser:
            changed.append(f"{path} had mode {mode:04o}, readable by others: tightened to {wanted:04o}")
    return changed


# -- atomic writes: synergy.common.files (fsync_dir, write_atomically, TEMP_PREFIX) ---------------
def remove_stale_temp_files(state_dir: Path) -> None:
    """Temp files a crash left behind (they are never the only copy of anything)."""
    for tmp in Path(state_dir).glob(f"{TEMP_PREFIX}*"):
        tmp.unlink(missing_ok=True)


# -- tokens -----------------------------------------------------------------------------------------
def read_token(path: Path) -> str:
    try:
        value = Path(path).read_text().strip()
    except FileNotFoundError:
        raise StateDirError(f"token file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StateDirError(f"token file {path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    if len(value) < MIN_TOKEN_CHARS:
        raise StateDirError(f"token file {path} holds fewer than {MIN_TOKEN_CHARS} characters")
    return value


def ensure_token(path: Path, warn: Callable[[str], None]) -> str:
    """The token in `path` (a state dir default), generated atomically when missing or empty.

    An empty file is what a full disk left behind before tokens were written atomically; no
    one can have used it, so it is replaced (with a warning) instead of blocking every start.
    """
    path = Path(path)
    try:
        empty = path.exists() and not path.read_bytes().strip()
    except OSError as exc:
        raise StateDirError(f"token file {path}: cannot read ({_why(exc)})") from None
    if empty:
        warn(f"token file {path} was empty (left by an interrupted first start): generating a new one")
    if empty or not path.exists():
        try:
            write_atomically(path, (secrets.token_urlsafe(32) + "\n").encode())
        except OSError as exc:
            raise StateDirError(f"cannot write token file {path} ({_why(exc)}); nothing was left behind") from None
    return read_token(path)


# -- the database: integrity, identity, snapshots ---------------------------------------------------
@dataclass(frozen=True)
class DatabaseSummary:
    """What a checked database holds."""

    path: Path
    size_bytes: int
    jobs: int
    nodes: int
    schema_version: str


def is_corruption(exc: BaseException) -> bool:
    """Whether an sqlite3 error means the file is damaged (not busy, not full, not locked)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text


def table_names(conn: sqlite3.Connection) -> set[str]:
    return {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def verify_database(conn: sqlite3.Connection, path: Path, *, full: bool) -> DatabaseSummary:
    """Integrity (quick_check, or integrity_check with `full`) and identity of an open database.

    quick_check reads every page and checks the b-trees (what a garbage page breaks) but not
    that indexes match their tables; it is what synergyd runs at every start (docs/daemon.md
    has its cost). Backups and restores run the full check. Raises DatabaseDamaged, or
    StateDirError for a synergyd database of another schema version.
    """
    check = "integrity_check" if full else "quick_check"
    try:
        rows = [r[0] for r in conn.execute(f"PRAGMA {check}(20)")]
        if rows != ["ok"]:
            more = f" (+{len(rows) - 1} more)" if len(rows) > 1 else ""
            raise DatabaseDamaged(f"database {path} is damaged: {check} says {' '.join(rows[0].split())}{more}")
        missing = [t for t in TABLES if t not in table_names(conn)]
        if missing:
            raise DatabaseDamaged(f"{path} is not a synergyd database (no table {', '.join(missing)})")
        found = conn.execute("SELECT value FROM settings WHERE key='schema_version'").fetchone()
        if found is None:
            raise DatabaseDamaged(f"{path} is not a synergyd database (no schema_version setting)")
        if found[0] != SCHEMA_VERSION:
            raise WrongSchemaVersion(f"{path}: schema version {found[0]}, this synergy reads {SCHEMA_VERSION}")
        jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        nodes = conn.execute("SELECT count(*) FROM nodes").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise DatabaseDamaged(f"database {path} is damaged or not a database ({exc})") from None
    size = Path(path).stat().st_size if Path(path).exists() else 0
    return DatabaseSummary(Path(path), size, jobs, nodes, found[0])


def _connect_readonly(path: Path) -> sqlite3.Connection:
    if not Path(path).is_file():
        raise StateDirError(f"{path} does not exist or is not a file")
    return sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)


def check_database(path: Path, *, full: bool = True) -> DatabaseSummary:
    """Open `path` read-only and verify it (see verify_database)."""
    try:
        conn = _connect_readonly(path)
    except sqlite3.Error as exc:
        raise DatabaseDamaged(f"cannot open {path} as a database ({exc})") from None
    try:
        return verify_database(conn, path, full=full)
    finally:
        conn.close()


def require_database_with_tokens(state_dir: Path) -> None:
    """Refuse a missing or empty database next to existing tokens: the jobs were lost, not never there.

    Starting afresh there would silently forget every job (and hand out the old tokens to a
    cluster that no longer knows its jobs); the operator restores a backup or picks a new dir.
    """
    state_dir = Path(state_dir)
    if not any((state_dir / n).exists() for n in TOKEN_FILES):
        return
    db = state_dir / DB_FILE
    size = db.stat().st_size if db.exists() else None
    wal = Path(f"{db}-wal")
    if not size and not (wal.exists() and wal.stat().st_size):  # WAL frames alone may still hold it
        what = "no database" if size is None else f"an empty database ({DB_FILE} is 0 bytes)"
        raise DatabaseDamaged(
            f"state dir {state_dir} has tokens but {what}: restore it "
            f"('synergy admin restore FILE --state-dir {state_dir}') or start with a new state dir"
        )


def snapshot_database(source: sqlite3.Connection, dest: Path) -> DatabaseSummary:
    """Copy an open database into a new file `dest` (SQLite's online backup API) and verify it.

    The copy is one backup step: one read transaction, so it is a consistent snapshot even
    while the daemon keeps committing (WAL readers do not block its writer). The copy is a
    self-contained rollback-journal file (no -wal beside it), fsynced, checked in full.
    """
    dest = Path(dest)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # owner-only before any byte
    os.close(fd)
    try:
        out = sqlite3.connect(dest)
        try:
            source.backup(out)
            out.execute("PRAGMA journal_mode=DELETE")
            summary = verify_database(out, dest, full=True)
        finally:
            out.close()
        with open(dest, "rb") as f:
            os.fsync(f.fileno())
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return DatabaseSummary(dest, dest.stat().st_size, summary.jobs, summary.nodes, summary.schema_version)


def restore_database(state_dir: Path, backup: Path) -> DatabaseSummary:
    """Replace the state dir's database with `backup`, offline; tokens and everything else stay.

    Holds the state dir lock throughout (StateDirLocked while a synergyd runs). The backup
    is checked in full first (DatabaseDamaged, WrongSchemaVersion, or StateDirError when it
    is not a file: nothing changes), copied into the dir and
    checked again, then swapped in by rename; the old database and its WAL are kept as
    `synergyd.sqlite.before-restore` (+ `-wal`), never mixed with the new file.
    """
    state_dir, backup = Path(state_dir), Path(backup)
    if not state_dir.is_dir():
        raise StateDirError(f"--state-dir {state_dir} does not exist")
    check_database(backup, full=True)
    with locked(state_dir):
        tmp = state_dir / f"{TEMP_PREFIX}restore.{secrets.token_hex(4)}.sqlite"
        try:
            source = _connect_readonly(backup)
            try:
                summary = snapshot_database(source, tmp)
            finally:
                source.close()
            db = state_dir / DB_FILE
            kept = state_dir / REPLACED_DB_FILE
            for suffix in ("", *DB_SIDE_SUFFIXES):
                Path(f"{kept}{suffix}").unlink(missing_ok=True)
            if db.exists():
                os.replace(db, kept)
            # The old WAL belongs to the old file: beside the new one it would be replayed into it.
            wal = Path(f"{db}-wal")
            if wal.exists():
                os.replace(wal, f"{kept}-wal")
            Path(f"{db}-shm").unlink(missing_ok=True)
            os.replace(tmp, db)
            fsync_dir(state_dir)
        except OSError as exc:
            raise StateDirError(f"cannot restore into {state_dir} ({_why(exc)})") from None
        finally:
            tmp.unlink(missing_ok=True)
    return DatabaseSummary(state_dir / DB_FILE, summary.size_bytes, summary.jobs, summary.nodes, summary.schema_version)


# -- the daemon's handle ----------------------------------------------------------------------------
class StateDir:
    """Owns the directory for the life of one daemon process."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None

    def open(self, warn: Callable[[str], None], dir_mode: int = 0o700) -> None:
        """Create (`dir_mode`: 0700, 0711 with the Unix socket in it), lock, tighten modes (warning
        through `warn`), and refuse a lost database.

        StateDirLocked when another synergyd holds it; DatabaseDamaged when tokens exist but
        the database is missing or empty.
        """
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StateDirError(f"--state-dir {self.path}: cannot create ({_why(exc)})") from None
        self._lock_fd = acquire_lock(self.path)
        for message in tighten_permissions(self.path, dir_mode):
            warn(message)
        remove_stale_temp_files(self.path)
        require_database_with_tokens(self.path)

    @property
    def database(self) -> Path:
        return self.path / DB_FILE

    def close(self) -> None:
        """Remove the address files and release the lock (only if this process holds it)."""
        if self._lock_fd is None:
            return
        for name in (ADDRESS_FILE, METRICS_ADDRESS_FILE, AGENT_ADDRESS_FILE, DASHBOARD_ADDRESS_FILE):
            (self.path / name).unlink(missing_ok=True)
        os.close(self._lock_fd)  # releases the flock
        self._lock_fd = None

    def token(self, override: Path | None, default_name: str, warn: Callable[[str], None]) -> str:
        """Read the token file; the state dir's own (no override) is generated when missing."""
        if override is not None:
            return read_token(override)
        return ensure_token(self.path / default_name, warn)

    def previous_ports(self) -> tuple[int, int]:
        """(port, agent port) of the last run (0 where unknown)."""
        try:
            parts = [int(p) for p in (self.path / PORTS_FILE).read_text().split()][:2]
        except (OSError, ValueError):
            return 0, 0
        parts += [0] * (2 - len(parts))
        return parts[0], parts[1]

    def remember_ports(self, port: int, agent_port: int | None) -> None:
        write_atomically(self.path / PORTS_FILE, f"{port} {agent_port or 0}\n".encode(), mode=0o644)

    def write_address(self, name: str, address: str) -> None:
        write_atomically(self.path / name, (address + "\n").encode(), mode=0o644)
