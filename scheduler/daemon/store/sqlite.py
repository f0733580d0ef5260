"""SQLite state store (WAL): the daemon's default, one file in --state-dir.

Every write is one transaction committed (synchronous=FULL) before the in-memory view is
updated and before the RPC that caused it is answered, so `kill -9` at any instant leaves
either the old or the new state, never half of a round.
"""

from __future__ import annotations

import json
import os
import sqlite3
from array import array
from itertools import islice
from pathlib import Path
from typing import Callable, Collection, Iterable, Iterator

from synergy.scheduler.daemon.records import (
    JobRecord,
    JobState,
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

#: Jobs read from disk in one query (below SQLite's limit on bound parameters).
READ_CHUNK = 500
_ENDED = tuple(s.value for s in JobState if s.terminal)


def _marks(n: int) -> str:
    """`n` bound parameters for an `IN (...)`."""
    return ",".join("?" * n)


def _chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    """`ids` in lists of at most READ_CHUNK, for one query each."""
    it = iter(ids)
    while chunk := list(islice(it, READ_CHUNK)):
        yield chunk


_MARKS = _marks(len(_ENDED))


class SqliteStore(MemoryStore):
    """Write-through: SQLite is the truth, the inherited MemoryStore is the read cache.

    Opening checks the file first (statedir.verify_database: quick_check and the schema),
    so a damaged database stops the start with one line instead of failing writes later.
    A write that finds the file damaged while running calls `on_damaged` once and re-raises.

    `finished_in_memory`: the cache keeps the records of at most this many ended jobs, those
    that ended last (None: every job). A long-lived cluster ends jobs by the hundred
    thousand, 5-11 KB of memory each (more with a profile; benchmarks/daemon_history.py); older ones stay on
    disk, counted and indexed by name, and are read back when asked for (`job`,
    `jobs_named`, `scan_jobs`, `finished_newest_first`). Active jobs are always in memory,
    so renewals, heartbeats and rounds never wait for the disk.
    """

    def __init__(self, path: Path, on_damaged: OnDamaged | None = None,
                 finished_in_memory: int | None = None) -> None:
        super().__init__()
        self.path = Path(path)
        self._on_damaged = on_damaged
        self._keep_finished = finished_in_memory
        #: Ids of the ended jobs left on disk, in the order they ended (8 bytes each).
        self._on_disk = array("q")
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
        kept = self._leave_on_disk()
        if kept is not None:  # only the active jobs and the ended ones kept are read
            for (b,) in self._db.execute(f"SELECT body FROM jobs WHERE state NOT IN ({_MARKS}) ORDER BY id", _ENDED):
                MemoryStore._remember_jobs(self, [job_from_dict(json.loads(b))])
            MemoryStore._remember_jobs(self, self._read(kept))
            self._sort_names()
        else:
            for (b,) in self._db.execute("SELECT body FROM jobs ORDER BY id"):
                MemoryStore._remember_jobs(self, [job_from_dict(json.loads(b))])
        for (b,) in self._db.execute("SELECT body FROM nodes ORDER BY id"):
            MemoryStore.save_nodes(self, [node_from_dict(json.loads(b))])
        for row in self._db.execute("SELECT job_id, steps_done, samples_per_s, attained_gpu_s FROM progress"):
            self._apply_progress(*row)
        self._order_finished()
        for k, v in self._db.execute("SELECT key, value FROM settings"):
            MemoryStore.save_setting(self, k, v)
        for (b,) in self._db.execute("SELECT body FROM users ORDER BY name"):
            MemoryStore.save_user(self, user_from_dict(json.loads(b)))

    def _leave_on_disk(self) -> list[int] | None:
        """Load-time: index the ended jobs beyond `finished_in_memory` (those that ended
        first) without reading their records; the ids of the ended jobs to read, or None
        when none is left on disk (every job is read)."""
        if self._keep_finished is None:
            return None
        ended = self._db.execute(
            "SELECT id, name, state, json_extract(body, '$.finished_at'), json_extract(body, '$.spec.user') "
            f"FROM jobs WHERE state IN ({_MARKS})", _ENDED).fetchall()
        ended.sort(key=lambda row: (row[3] or 0.0, row[0]))
        cut = max(0, len(ended) - self._keep_finished)
        for job_id, name, state, _, user in ended[:cut]:
            self._index_absent(job_id, name, JobState(state), user or "")
            self._on_disk.append(job_id)
        return sorted(row[0] for row in ended[cut:]) if cut else None

    def _read(self, ids: list[int], states: Collection[JobState] = ()) -> list[JobRecord]:
        """Records from disk, in the order of `ids` (missing ones left out; of `states`
        only, unless empty), with any newer progress counters applied."""
        found: dict[int, JobRecord] = {}
        values = [s.value for s in states]
        only = f" AND j.state IN ({_marks(len(values))})" if values else ""
        for chunk in _chunks(ids):
            for job_id, body, steps, speed, gpu_s in self._db.execute(
                "SELECT j.id, j.body, p.steps_done, p.samples_per_s, p.attained_gpu_s FROM jobs j "
                f"LEFT JOIN progress p ON p.job_id = j.id WHERE j.id IN ({_marks(len(chunk))}){only}",
                [*chunk, *values]):
                job = job_from_dict(json.loads(body))
                if steps is not None:
                    job = job.with_progress(steps, speed, gpu_s)
                found[job_id] = job
        return [found[i] for i in ids if i in found]

    # -- reads that reach the ended jobs left on disk ------------------------------------------
    def job(self, job_id: int) -> JobRecord | None:
        found = super().job(job_id)
        if found is None and self._on_disk and 0 < job_id <= self._max_id:
            return next(iter(self._read([job_id])), None)
        return found

    def jobs_named(self, name: str) -> list[JobRecord]:
        ids = self._names.get(name, [])
        missing = [i for i in ids if i not in self._jobs]
        if not missing:
            return super().jobs_named(name)
        disk = {j.id: j for j in self._read(missing)}
        return [j for j in (self._jobs.get(i) or disk.get(i) for i in ids) if j is not None]

    def scan_jobs(
        self, after: int = 0, descending: bool = False, states: Collection[JobState] = ()
    ) -> Iterator[JobRecord]:
        if not self._on_disk or (states and not any(s.terminal for s in states)):  # all in memory
            yield from super().scan_jobs(after, descending, states)
            return
        # Ids are given in order from 1 and jobs are never deleted: walk the range, so that a
        # page of the newest jobs costs a page, not a sort of every id.
        ids = range(self._max_id, after, -1) if descending else range(after + 1, self._max_id + 1)
        for chunk in _chunks(ids):
            disk = {j.id: j for j in self._read([i for i in chunk if i not in self._jobs], states)}
            for i in chunk:
                job = self._jobs.get(i) or disk.get(i)
                if job is not None and (not states or job.state in states):
                    yield job

    def job_tokens(self) -> Iterator[tuple[int, str]]:
        yield from super().job_tokens()
        for chunk in _chunks(self._on_disk):
            yield from self._db.execute(
                f"SELECT id, json_extract(body, '$.token') FROM jobs WHERE id IN ({_marks(len(chunk))})", chunk)

    def profiled_jobs(self) -> Iterator[JobRecord]:
        yield from super().profiled_jobs()
        for chunk in _chunks(self._on_disk):
            found = self._db.execute(
                f"SELECT id FROM jobs WHERE id IN ({_marks(len(chunk))}) "
                "AND json_extract(body, '$.profiled')", chunk)
            yield from self._read([job_id for (job_id,) in found])

    def finished_newest_first(self) -> Iterator[JobRecord]:
        yield from super().finished_newest_first()
        for chunk in _chunks(reversed(self._on_disk)):
            yield from self._read(chunk)

    def _remember_jobs(self, jobs: list[JobRecord]) -> None:
        super()._remember_jobs(jobs)
        if self._keep_finished is not None:
            while len(self._finished) > self._keep_finished:
                self._on_disk.append(self._drop_oldest_finished())

    def _saved_on_disk(self, jobs: list[JobRecord]) -> dict[int, JobRecord]:
        """The records, read before a save replaces them, of the ended jobs left on disk
        that `jobs` saves again (a late checkpoint report, say)."""
        if not self._on_disk:
            return {}
        return {j.id: j for j in self._read([j.id for j in jobs if j.id not in self._jobs and j.id <= self._max_id])}

    def _settle(self, jobs: list[JobRecord], olds: dict[int, JobRecord]) -> list[JobRecord]:
        """After a save's commit: an ended job left on disk and saved as ended stays there,
        in its place among the ended, with its counts moved; one saved as active comes back
        to memory. The jobs the cache is left to remember."""
        rest = []
        for j in jobs:
            old = olds.get(j.id)
            if old is not None and j.state.terminal:
                self._recount(old, j)
                continue
            if old is not None:
                self._on_disk.remove(j.id)
                self._put_back(old)
            rest.append(j)
        return rest

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
        olds = self._saved_on_disk(jobs)
        self._commit(statements)
        super().save_jobs(self._settle(jobs, olds))

    def save_progress(self, jobs: Iterable[JobRecord]) -> None:
        jobs = list(jobs)
        if not jobs:
            return
        olds = self._saved_on_disk(jobs)
        self._commit(
            [
                (
                    "INSERT OR REPLACE INTO progress VALUES (?, ?, ?, ?)",
                    (j.id, j.steps_done, j.samples_per_s, j.attained_gpu_s),
                )
                for j in jobs
            ]
        )
        super().save_progress(self._settle(jobs, olds))

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
