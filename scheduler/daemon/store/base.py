"""The state-store interface: one protocol, an in-memory and an SQLite backend.

The same daemon code runs on both (unit tests use memory, `synergyd` uses SQLite). Reads
come from memory in both backends, so lease renewals and heartbeats never touch the disk;
writes are committed by the SQLite backend before they become visible, which is what
"acknowledged only after it is durable" rests on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Collection, Iterable, Iterator, Protocol

from synergy.scheduler.daemon.records import JobRecord, JobState, NodeRecord
from synergy.scheduler.daemon.users import UserRecord
from synergy.scheduler.statedir import DatabaseSummary


class StateStore(Protocol):
    def jobs(self) -> list[JobRecord]:
        """Every job, ordered by id: all of them in memory at once (tests, small clusters);
        walk a long history with `scan_jobs`."""
        ...

    def scan_jobs(
        self, after: int = 0, descending: bool = False, states: Collection[JobState] = ()
    ) -> Iterator[JobRecord]:
        """Jobs with an id above `after` in `states` (all when empty), by id (the highest
        first when `descending`), read as the caller goes: the SQLite store reads the ended
        jobs it keeps on disk in chunks, and only those in `states` (none for a listing of
        active jobs). Do not save jobs while iterating."""
        ...

    def active_jobs(self) -> list[JobRecord]:
        """Jobs not in a terminal state, ordered by id (the hot path: rounds, heartbeats)."""
        ...

    def job(self, job_id: int) -> JobRecord | None: ...

    def running_on(self, node_id: str) -> list[JobRecord]:
        """Placed jobs (RUNNING, or PROFILING under a profiling lease) with a share on `node_id`, ordered by id (indexed: heartbeats ask often)."""
        ...

    def jobs_named(self, name: str) -> list[JobRecord]:
        """Jobs with this name, oldest first (names are reusable once a job has ended)."""
        ...

    def active_named(self, name: str) -> list[JobRecord]:
        """The jobs with this name not in a terminal state (a submission's name check):
        from memory, without reading the ended jobs of that name left on disk."""
        ...

    def renewing_ranks(self) -> int:
        """Ranks of placed jobs that renew a lease (every placed job but a CPU-only one, which
        runs a plain command): kept as jobs are saved, since the cadence asks every second."""
        ...

    def state_counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state a key), kept as jobs are saved:
        what `/metrics` and the status RPC read, at no cost that grows with finished jobs."""
        ...

    def job_tokens(self) -> Iterator[tuple[int, str]]:
        """(job id, token) of every job: synergyd's start-up indexes them all, without
        reading the whole record of every ended job left on disk."""
        ...

    def profiled_jobs(self) -> Iterator[JobRecord]:
        """Jobs measured under a profiling lease (`profiled`), in no set order: the profile
        store is rebuilt from them at start-up (profile_store.py keeps the latest job's per
        workload whatever the order), not from every job ever submitted."""
        ...

    def finished_newest_first(self) -> Iterator[JobRecord]:
        """Jobs in a terminal state, the last to end first (by `finished_at` across a
        restart): the latest few, or those ended since a time, without a walk over all of
        them. Do not save jobs while iterating."""
        ...

    def finished_count(self, user: str | None = None) -> int:
        """How many jobs have ended (of `user` only, unless None)."""
        ...

    def next_job_id(self) -> int: ...

    def save_jobs(self, jobs: Iterable[JobRecord]) -> None:
        """Insert or replace, all in one transaction."""
        ...

    def save_progress(self, jobs: Iterable[JobRecord]) -> None:
        """Persist only the progress counters (steps_done, samples_per_s, attained_gpu_s).

        The periodic flush of what renewals report: much cheaper than `save_jobs`, and
        nothing else of the records may have changed.
        """
        ...

    def nodes(self) -> list[NodeRecord]:
        """Every node, ordered by id."""
        ...

    def node(self, node_id: str) -> NodeRecord | None: ...

    def save_nodes(self, nodes: Iterable[NodeRecord]) -> None: ...

    def setting(self, key: str) -> str | None: ...

    def save_setting(self, key: str, value: str) -> None: ...

    def users(self) -> list[UserRecord]:
        """Every user an admin added (users.py), ordered by name."""
        ...

    def save_user(self, user: UserRecord) -> None: ...

    def snapshot(self, dest: Path) -> DatabaseSummary:
        """Write a consistent, verified copy of the database to the new file `dest` (a backup).

        Safe on any thread while the daemon serves; FailedPrecondition without a database.
        """
        ...

    def close(self) -> None: ...
