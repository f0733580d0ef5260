"""SQLite state store (WAL): the daemon's default, one file in --state-dir.

Every write is one transaction committed (synchronous=FULL) before the in-memory view is
updated and before the RPC that caused it is answered, so `kill -9` at any instant leaves
either the old or the new state, never half of a round.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Callable, Iterable

from synergy.scheduler.daemon.records import (
    JobRecord,
    NodeRecord,
    job_from_dict,
    job_to_dict,
    node_from_dict,
    node_to_dict,
)
from synergy.scheduler.daemon.store.memory import MemoryStore
from synergy.scheduler.daemon.users import UserRecord, user_from_dict, user_to_dict
from synergy.scheduler.statedir import (
    SCHEMA_VERSION,
    DatabaseDamaged,
    DatabaseSummary,
    StateDirError,
    is_corruption,
    snapshot_database,
    table_names,
    verify_database,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_by_name ON jobs(name);
CREATE TABLE IF NOT EXISTS nodes (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS progress (
    job_id INTEGER PRIMARY KEY, steps_done INTEGER NOT NULL, samples_per_s REAL NOT NULL, attained_gpu_s REAL NOT NULL
);
"""
#: Added after schema version 1 shipped: created when missing, so older state dirs and
#: backups open as they are (and an older synergyd ignores the table).
_USERS_SCHEMA = "CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, body TEXT NOT NULL)"

#: Called once, with the error, when a write finds the database damaged (the daemon stops serving).
OnDamaged = Callable[[sqlite3.DatabaseError], None]


class SqliteStore(MemoryStore):
    """Write-through: SQLite is the truth, the inherited MemoryStore is the read cache.

    Opening checks the file first (statedir.verify_database: quick_check and the schema),
    so a damaged database stops the start with one line instead of failing writes later.
    A write that finds the file damaged while running calls `on_damaged` once and re-raises.
    """

    def __init__(self, path: Path, on_damaged: OnDamaged | None = None) -> None:
        super().__init__()
        self.path = Path(path)
        self._on_damaged = on_damaged
        self.damaged: sqlite3.DatabaseError | None = None
        try:
            if not self.path.exists():  # holds job tokens: owner-only from the start (WAL files inherit it)
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StateDirError(f"cannot open the database {self.path} ({getattr(exc, 'strerror', None) or exc})") from None
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            if is_corruption(exc):
                raise DatabaseDamaged(f"database {self.path} is damaged or not a database ({exc})") from None
            raise StateDirError(f"cannot open the database {self.path} ({exc})") from None
        except BaseException:
            self._db.close()
            raise

    def _open(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        if not table_names(self._db):  # a new database: the whole schema in one transaction
            self._commit(
                [(stmt, ()) for stmt in _SCHEMA.split(";") if stmt.strip()]
                + [("INSERT INTO settings VALUES ('schema_version', ?)", (SCHEMA_VERSION,))]
            )
        verify_database(self._db, self.path, full=False)
        if "users" not in table_names(self._db):
            self._commit([(_USERS_SCHEMA, ())])
        self._load()

    def snapshot(self, dest: Path) -> DatabaseSummary:
        """A consistent copy of the database in `dest` while the daemon keeps serving (a backup).

        Reads through a connection of its own, so it runs on any thread without the state lock.
        """
        source = sqlite3.connect(self.path)
        try:
            return snapshot_database(source, dest)
        finally:
            source.close()

    def _load(self) -> None:
        rows = self._db.execute("SELECT body FROM jobs ORDER BY id").fetchall()
        self._remember_jobs([job_from_dict(json.loads(b)) for (b,) in rows])
        for (b,) in self._db.execute("SELECT body FROM nodes ORDER BY id"):
            MemoryStore.save_nodes(self, [node_from_dict(json.loads(b))])
        for row in self._db.execute("SELECT job_id, steps_done, samples_per_s, attained_gpu_s FROM progress"):
            self._apply_progress(*row)
        self._order_finished()
        for k, v in self._db.execute("SELECT key, value FROM settings"):
            MemoryStore.save_setting(self, k, v)
        for (b,) in self._db.execute("SELECT body FROM users ORDER BY name"):
            MemoryStore.save_user(self, user_from_dict(json.loads(b)))

    def _commit(self, statements: list[tuple[str, tuple]]) -> None:
        try:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    cur.execute(sql, args)
                cur.execute("COMMIT")
            except BaseException:
                # Also when COMMIT itself failed (a full disk): a transaction left open would
                # make every later BEGIN fail, long after space is back.
                if self._db.in_transaction:
                    try:
                        self._db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise
        except sqlite3.DatabaseError as exc:
            if is_corruption(exc) and self.damaged is None:
                self.damaged = exc
                if self._on_damaged is not None:
                    self._on_damaged(exc)
            raise

    def save_jobs(self, jobs: Iterable[JobRecord]) -> None:
        jobs = list(jobs)
        if not jobs:
            return
        statements: list[tuple[str, tuple]] = []
        for j in jobs:
            body = json.dumps(job_to_dict(j), separators=(",", ":"))
            statements.append(
                (
                    "INSERT OR REPLACE INTO jobs (id, name, state, body) VALUES (?, ?, ?, ?)",
                    (j.id, j.name, j.state.value, body),
                )
            )
            statements.append(("DELETE FROM progress WHERE job_id = ?", (j.id,)))  # the body is newer
        self._commit(statements)
        super().save_jobs(jobs)

    def save_progress(self, jobs: Iterable[JobRecord]) -> None:
        jobs = list(jobs)
        if not jobs:
            return
        self._commit(
            [
                (
                    "INSERT OR REPLACE INTO progress VALUES (?, ?, ?, ?)",
                    (j.id, j.steps_done, j.samples_per_s, j.attained_gpu_s),
                )
                for j in jobs
            ]
        )
        super().save_progress(jobs)

    def save_nodes(self, nodes: Iterable[NodeRecord]) -> None:
        nodes = list(nodes)
        if not nodes:
            return
        self._commit(
            [
                ("INSERT OR REPLACE INTO nodes (id, body) VALUES (?, ?)", (n.id, json.dumps(node_to_dict(n))))
                for n in nodes
            ]
        )
        super().save_nodes(nodes)

    def save_setting(self, key: str, value: str) -> None:
        self._commit([("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (key, value))])
        super().save_setting(key, value)

    def save_user(self, user: UserRecord) -> None:
        body = json.dumps(user_to_dict(user), separators=(",", ":"))
        self._commit([("INSERT OR REPLACE INTO users (name, body) VALUES (?, ?)", (user.name, body))])
        super().save_user(user)

    def close(self) -> None:
        self._db.close()
