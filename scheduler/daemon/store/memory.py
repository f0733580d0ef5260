"""In-memory state store: the reference backend, and the read cache of the SQLite one."""
from __future__ import annotations

from typing import Iterable

from synergy.scheduler.daemon.records import JobRecord, NodeRecord


class MemoryStore:
    """Not thread-safe on its own: the daemon serialises access with its state lock."""

    def __init__(self) -> None:
        self._jobs: dict[int, JobRecord] = {}
        self._names: dict[str, list[int]] = {}
        self._nodes: dict[str, NodeRecord] = {}
        self._settings: dict[str, str] = {}

    # -- reads --------------------------------------------------------------------------------
    def jobs(self) -> list[JobRecord]:
        return [self._jobs[k] for k in sorted(self._jobs)]

    def job(self, job_id: int) -> JobRecord | None:
        return self._jobs.get(job_id)

    def jobs_named(self, name: str) -> list[JobRecord]:
        return [self._jobs[i] for i in self._names.get(name, ())]

    def next_job_id(self) -> int:
        return max(self._jobs, default=0) + 1

    def nodes(self) -> list[NodeRecord]:
        return [self._nodes[k] for k in sorted(self._nodes)]

    def node(self, node_id: str) -> NodeRecord | None:
        return self._nodes.get(node_id)

    def setting(self, key: str) -> str | None:
        return self._settings.get(key)

    # -- writes -------------------------------------------------------------------------------
    def save_jobs(self, jobs: Iterable[JobRecord]) -> None:
        self._remember_jobs(list(jobs))

    def save_nodes(self, nodes: Iterable[NodeRecord]) -> None:
        for n in nodes:
            self._nodes[n.id] = n

    def save_setting(self, key: str, value: str) -> None:
        self._settings[key] = value

    def close(self) -> None:
        pass

    def _remember_jobs(self, jobs: list[JobRecord]) -> None:
        for j in jobs:
            old = self._jobs.get(j.id)
            if old is None:
                self._names.setdefault(j.name, []).append(j.id)
            self._jobs[j.id] = j
