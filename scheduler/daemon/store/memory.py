"""In-memory state store: the reference backend, and the read cache of the SQLite one."""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Collection, Iterable, Iterator

from synergy.scheduler.daemon.errors import FailedPrecondition
from synergy.scheduler.daemon.records import JobRecord, JobState, NodeRecord
from synergy.scheduler.daemon.users import UserRecord
from synergy.scheduler.statedir import DatabaseSummary


class MemoryStore:
    """Not thread-safe on its own: the daemon serialises access with its state lock."""

    def __init__(self) -> None:
        self._jobs: dict[int, JobRecord] = {}
        self._names: dict[str, list[int]] = {}
        self._active: dict[int, JobRecord] = {}
        self._active_sorted: list[JobRecord] | None = None
        #: node id -> RUNNING jobs with a share on it (heartbeats look here, not at every job).
        self._on_node: dict[str, dict[int, JobRecord]] = {}
        self._renewing_ranks = 0
        #: Jobs per state, kept as jobs are saved: gauges and status read it on every scrape,
        #: and counting every job ever submitted there grew with the cluster's history.
        self._counts: dict[JobState, int] = dict.fromkeys(JobState, 0)
        #: Ended jobs in the order they ended (ordered by `finished_at` after a load too), and
        #: how many each user has: the dashboard lists the latest and counts the rest.
        self._finished: OrderedDict[int, JobRecord] = OrderedDict()
        self._finished_by_user: Counter[str] = Counter()
        self._max_id = 0
        self._nodes: dict[str, NodeRecord] = {}
        self._settings: dict[str, str] = {}
        self._users: dict[str, UserRecord] = {}

    # -- reads --------------------------------------------------------------------------------
    def jobs(self) -> list[JobRecord]:
        return list(self.scan_jobs())

    def scan_jobs(
        self, after: int = 0, descending: bool = False, states: Collection[JobState] = ()
    ) -> Iterator[JobRecord]:
        ids = sorted((k for k in self._jobs if k > after), reverse=descending)
        found = (self._jobs[k] for k in ids)
        return (j for j in found if j.state in states) if states else found

    def active_jobs(self) -> list[JobRecord]:
        if self._active_sorted is None:  # rebuilt only after a write: reads dominate
            self._active_sorted = [self._active[k] for k in sorted(self._active)]
        return list(self._active_sorted)

    def job(self, job_id: int) -> JobRecord | None:
        return self._jobs.get(job_id)

    def running_on(self, node_id: str) -> list[JobRecord]:
        held = self._on_node.get(node_id, {})
        return [held[k] for k in sorted(held)]

    def renewing_ranks(self) -> int:
        return self._renewing_ranks

    def state_counts(self) -> dict[JobState, int]:
        return dict(self._counts)

    def job_tokens(self) -> Iterator[tuple[int, str]]:
        return ((j.id, j.token) for j in self._jobs.values())

    def profiled_jobs(self) -> Iterator[JobRecord]:
        return (j for j in self._jobs.values() if j.profiled)

    def finished_newest_first(self) -> Iterator[JobRecord]:
        return reversed(self._finished.values())

    def finished_count(self, user: str | None = None) -> int:
        if user is None:
            return sum(n for state, n in self._counts.items() if state.terminal)
        return self._finished_by_user[user]

    def jobs_named(self, name: str) -> list[JobRecord]:
        return [self._jobs[i] for i in self._names.get(name, ())]

    def active_named(self, name: str) -> list[JobRecord]:
        return [self._active[i] for i in self._names.get(name, ()) if i in self._active]

    def next_job_id(self) -> int:
        return self._max_id + 1

    def nodes(self) -> list[NodeRecord]:
        return [self._nodes[k] for k in sorted(self._nodes)]

    def node(self, node_id: str) -> NodeRecord | None:
        return self._nodes.get(node_id)

    def setting(self, key: str) -> str | None:
        return self._settings.get(key)

    def users(self) -> list[UserRecord]:
        return [self._users[k] for k in sorted(self._users)]

    # -- writes -------------------------------------------------------------------------------
    def save_jobs(self, jobs: Iterable[JobRecord]) -> None:
        self._remember_jobs(list(jobs))

    def save_progress(self, jobs: Iterable[JobRecord]) -> None:
        self._remember_jobs(list(jobs))

    def save_nodes(self, nodes: Iterable[NodeRecord]) -> None:
        for n in nodes:
            self._nodes[n.id] = n

    def save_setting(self, key: str, value: str) -> None:
        self._settings[key] = value

    def save_user(self, user: UserRecord) -> None:
        self._users[user.name] = user

    def snapshot(self, dest: Path) -> DatabaseSummary:
        raise FailedPrecondition("this synergyd keeps its state in memory: there is no database to back up")

    def close(self) -> None:
        pass

    def _remember_jobs(self, jobs: list[JobRecord]) -> None:
        for j in jobs:
            old = self._jobs.get(j.id)
            if old is None:
                self._names.setdefault(j.name, []).append(j.id)
                self._max_id = max(self._max_id, j.id)
            else:
                for p in old.placements:
                    self._on_node.get(p.server_id, {}).pop(j.id, None)
                self._renewing_ranks -= _renewing(old)
                self._counts[old.state] -= 1
            self._renewing_ranks += _renewing(j)
            self._counts[j.state] += 1
            self._jobs[j.id] = j
            if j.state.terminal:
                self._active.pop(j.id, None)
                if j.id not in self._finished:
                    self._finished_by_user[j.spec.user] += 1
                self._finished[j.id] = j  # a job saved again after it ended keeps its place
            else:
                self._active[j.id] = j
                if self._finished.pop(j.id, None) is not None:
                    self._finished_by_user[old.spec.user] -= 1
            if j.placed:
                for p in j.placements:
                    self._on_node.setdefault(p.server_id, {})[j.id] = j
        self._active_sorted = None

    def _order_finished(self) -> None:
        """Load-time helper: jobs load in id order; the ended ones are kept in the order they ended."""
        self._finished = OrderedDict((j.id, j) for j in sorted(self._finished.values(), key=lambda j: (j.finished_at, j.id)))

    def _index_absent(self, job_id: int, name: str, state: JobState, user: str) -> None:
        """Load-time helper of a cache that leaves a job on disk: its name, state and user
        are counted as if it were here (`_drop_oldest_finished` leaves them counted too)."""
        self._names.setdefault(name, []).append(job_id)
        self._max_id = max(self._max_id, job_id)
        self._counts[state] += 1
        if state.terminal:
            self._finished_by_user[user] += 1

    def _sort_names(self) -> None:
        """Load-time helper of `_index_absent`, which indexes names out of id order."""
        for ids in self._names.values():
            ids.sort()

    def _recount(self, old: JobRecord, new: JobRecord) -> None:
        """`old`, an ended job not in memory, saved again as `new` (ended too): move its counts."""
        self._counts[old.state] -= 1
        self._counts[new.state] += 1
        self._finished_by_user[old.spec.user] -= 1
        self._finished_by_user[new.spec.user] += 1

    def _drop_oldest_finished(self) -> int:
        """Drop the record of the job that ended first from memory (a cache making room; its
        counts and name stay); its id."""
        job_id, _ = self._finished.popitem(last=False)
        del self._jobs[job_id]
        return job_id

    def _put_back(self, job: JobRecord) -> None:
        """Undo `_drop_oldest_finished` for `job` (ended, read back from disk), so that saving
        it again replaces it rather than counting it twice."""
        self._jobs[job.id] = job
        self._finished[job.id] = job

    def _apply_progress(self, job_id: int, steps_done: int, samples_per_s: float, attained_gpu_s: float) -> None:
        """Load-time helper: newer progress counters over a job's stored body."""
        job = self._jobs.get(job_id)
        if job is not None:
            self._remember_jobs(
                [replace(job, steps_done=steps_done, samples_per_s=samples_per_s, attained_gpu_s=attained_gpu_s)]
            )


def _renewing(job: JobRecord) -> int:
    """The ranks of `job` that renew a lease (`StateStore.renewing_ranks`)."""
    return len(job.placements) if job.placed and not job.spec.cpu_only else 0
