"""The profile store (docs/profiles.md "Profile store"): a profile measured live is reused by
later jobs of the same workload, which then queue without a profiling lease.

Two jobs are the same workload when what decides their sensitivity is the same: the argv
(the script and its arguments, which name the data and the input pipeline), the working
directory, the environment, the model and task names, the GPU count (a profile is per GPU,
but a job's GPUs share one loader per node) and the search that measured it (`profiler:
synergy` reuses only what the Synergy search measured, `coda` only CODA's). Names,
checkpoint dirs, iteration counts, users and priorities differ between runs of one workload
and do not count. A different argument (another dataset, batch size or worker count) is
another workload and is profiled afresh: the store errs towards measuring.

Kept in the daemon's state: it is rebuilt from the job records (`JobRecord.reported_profile`
of jobs `profiled` under a lease), which the database keeps, so a restarted daemon reuses the
same profiles. The newest profile of a workload answers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping

from synergy.scheduler.jobspec import JobSpec


@dataclass(frozen=True)
class StoredProfile:
    """A live-measured profile and the job it was measured on."""

    job_id: int
    doc: Mapping[str, Any]

    @property
    def source(self) -> str:
        """The profile source a job answered by it shows (describe's `profile_source`)."""
        return f"stored:{self.job_id} (profiled live with job {self.job_id}: same command and data)"


def workload_key(spec: JobSpec) -> str | None:
    """The store's key for `spec` (module docstring); None for a CPU-only job (no profile)."""
    if spec.cpu_only:
        return None
    parts = {
        "command": list(spec.command),
        "working_dir": spec.working_dir,
        "env": [list(kv) for kv in spec.env],
        "model": spec.model,
        "task": spec.task,
        "gpus": spec.gpus,
        "search": spec.profile_search,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class ProfileStore:
    """Workload key -> the newest live-measured profile of that workload."""

    def __init__(self) -> None:
        self._by_key: dict[str, StoredProfile] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def learn(self, job_id: int, spec: JobSpec, profiled: bool, doc: Mapping[str, Any] | None) -> bool:
        """Keep the profile of a job profiled live (`profiled`, with its `doc`); a later job of
        the same workload replaces an earlier one. Returns whether it was kept."""
        key = workload_key(spec)
        if not profiled or doc is None or key is None:
            return False
        known = self._by_key.get(key)
        if known is not None and known.job_id > job_id:
            return False
        self._by_key[key] = StoredProfile(job_id, doc)
        return True

    def lookup(self, spec: JobSpec, excluding: int = 0) -> StoredProfile | None:
        """The stored profile of `spec`'s workload, if one was measured on another job."""
        key = workload_key(spec)
        hit = self._by_key.get(key) if key is not None else None
        return hit if hit is not None and hit.job_id != excluding else None
