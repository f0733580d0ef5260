"""Which sensitivity profile a job is scheduled with, and why.

Order of precedence: the profile the iterator measured under a profiling lease ("profiled")
or otherwise reported (measured on this job) > a profile
submitted with the job > a profile measured live on an earlier job of the same workload
(the profile store, profile_store.py: "stored:N"; not for `profiler: none`) > the zoo entry
for the job's model > a representative zoo model
for the job's task class > a "proportional" profile that asks for exactly the
GPU-proportional share (or the user's CPU / memory hints), which is what a scheduler
without sensitivity information would give.

Which jobs are profiled live (`needs_profiling`): a training job whose spec says
`profiler: synergy|coda`, or `auto` (the default) with no known profile (no spec profile, its
model not in the zoo / --profiles) and a checkpoint dir to resume from after; never `profiler: none`, CPU-only jobs, a job whose
profile was already reported, or one the profile store answers. Where the backend cannot
resize a running task (Slurm) such a job takes no profiling lease: it queues with its
stand-in and measures the CPUs each of its attempts holds (`measures_in_force`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from synergy.scheduler.daemon.profile_store import ProfileStore, StoredProfile
from synergy.scheduler.daemon.records import JobRecord
from synergy.scheduler.jobspec.spec import PROFILER_AUTO, PROFILER_CODA, PROFILER_NONE, PROFILER_SYNERGY
from synergy.scheduler.model import Cluster
from synergy.scheduler.profiles.format import SensitivityProfile
from synergy.scheduler.profiles.knee import knee_profile
from synergy.scheduler.profiles.zoo import get_profiles

#: What a job's parsed profile came from, the second half of `ProfileBook._parsed`'s keys.
_REPORTED, _SPEC = "reported", "spec"
_PARSED_KINDS = (_REPORTED, _SPEC)

#: Task class -> zoo model standing in for an unprofiled job of that class.
TASK_STAND_INS = {"image": "resnet18", "language": "lstm", "speech": "m5"}


def load_zoo(path: Path | None) -> dict[str, SensitivityProfile]:
    """The built-in zoo with `path` merged over it (ProfileError names a bad file/field)."""
    return dict(get_profiles(str(path) if path is not None else None))


#: describe's word for a job measured at the allocations it runs at, not yet measured (Slurm).
MEASURING_IN_FORCE = ("measured where it runs: the Slurm backend cannot resize a running task to profiling points, "
                      "so each Slurm job measures the CPUs it holds; the stand-in until the first (docs/slurm.md)")
#: The profile source of a job measured that way (a "profiled" one: kept in the profile store).
PROFILED_IN_FORCE = "profiled (under Slurm: measured at the CPUs each of its Slurm jobs held)"


class ProfileBook:
    def __init__(self, zoo: Mapping[str, SensitivityProfile], live_profiling: bool = True) -> None:
        self.zoo = dict(zoo)
        #: Live-measured profiles by workload (rebuilt from the job records at start: `learn`).
        self.store = ProfileStore()
        #: Profiling leases measure points by resizing the task in place; off where the backend cannot (Slurm).
        self.live_profiling = live_profiling
        self._parsed: dict[tuple[int, str], SensitivityProfile] = {}
        #: Proportional profiles depend only on the knee (and names): shared between jobs.
        self._proportional: dict[tuple[float, float, str, str], SensitivityProfile] = {}

    def source(self, job: JobRecord) -> str:
        """Where `profile()` will take the job's profile from, as shown by describe."""
        if job.reported_profile is not None:
            return (PROFILED_IN_FORCE if self.measures_in_force(job) else "profiled") if job.profiled else "reported"
        if job.spec.profile is not None:
            return "spec"
        stored = self.stored(job)
        if stored is not None:
            return stored.source
        if job.spec.model in self.zoo:
            return f"zoo:{job.spec.model}"
        stand_in = TASK_STAND_INS.get(job.spec.task)
        if stand_in in self.zoo:
            return f"zoo:{stand_in} (stand-in for task {job.spec.task})"
        return "proportional"

    def needs_profiling(self, job: JobRecord) -> bool:
        """Whether the job gets a profiling lease before it queues (module docstring)."""
        if job.reported_profile is not None or self.stored(job) is not None or not self.live_profiling:
            return False
        return self._wants_profile(job)

    def measures_in_force(self, job: JobRecord) -> bool:
        """Whether the job, under a backend that cannot resize running tasks (Slurm), measures
        the CPUs each attempt holds and reports its profile (job_servicer: `in_force_only`)."""
        if self.live_profiling or not self._wants_profile(job):
            return False
        return job.profiled or (job.reported_profile is None and self.stored(job) is None)

    def _wants_profile(self, job: JobRecord) -> bool:
        """Whether a job's profile is to be measured on it, however the backend measures it."""
        spec = job.spec
        if spec.cpu_only or spec.profiler == PROFILER_NONE:
            return False
        if spec.profiler in (PROFILER_SYNERGY, PROFILER_CODA):
            return True
        # `auto` profiles only a job that can stop and resume afterwards (a checkpoint dir);
        # without one it keeps the stand-in, as describe says (`why_not_profiled`).
        return spec.profile is None and spec.model not in self.zoo and bool(spec.checkpoint_dir)

    def why_not_profiled(self, job: JobRecord) -> str:
        """For describe: why an `auto` job with no known profile was not profiled live ('' if n/a)."""
        spec = job.spec
        if job.reported_profile is None and self.measures_in_force(job):
            return MEASURING_IN_FORCE
        if (spec.cpu_only or spec.profiler not in ("", PROFILER_AUTO) or spec.profile is not None
                or spec.model in self.zoo or spec.checkpoint_dir or job.reported_profile is not None
                or self.stored(job) is not None):
            return ""
        return "not profiled live: no checkpoint_dir to stop and resume from after profiling"

    def profile(self, job: JobRecord, cluster: Cluster) -> SensitivityProfile:
        if job.reported_profile is not None:
            return self._parse(job, _REPORTED, job.reported_profile)
        src = self.source(job)
        if src == "spec":
            return self._parse(job, _SPEC, job.spec.profile)
        if src.startswith("stored:"):
            stored = self.stored(job)
            assert stored is not None
            return self._parse_as(stored.job_id, _REPORTED, job.spec.model or job.name, stored.doc)
        if src.startswith("zoo:"):
            return self.zoo[src[4:].split(" ")[0]]
        knee = _knee(job, cluster)
        hit = self._proportional.get(knee)
        if hit is None:
            if len(self._proportional) > 4096:  # many distinct hints: start over rather than grow
                self._proportional.clear()
            hit = self._proportional[knee] = proportional_profile(job, cluster)
        return hit

    def stored(self, job: JobRecord) -> StoredProfile | None:
        """The profile store's answer for `job` (None: none, or `profiler: none`, which keeps
        the stand-in or the proportional share as it says)."""
        if job.spec.profiler == PROFILER_NONE:
            return None
        return self.store.lookup(job.spec, excluding=job.id)

    def learn(self, job: JobRecord) -> bool:
        """Keep `job`'s profile in the store if it was measured live under its lease."""
        return self.store.learn(job.id, job.spec, job.profiled, job.reported_profile)

    def forget(self, job_id: int) -> None:
        """Drop the parsed profiles of `job_id` (its profile changed, or it ended): one lookup
        per kind, since every job that ends calls it."""
        for kind in _PARSED_KINDS:
            self._parsed.pop((job_id, kind), None)

    def _parse(self, job: JobRecord, kind: str, doc: Mapping[str, Any] | None) -> SensitivityProfile:
        return self._parse_as(job.id, kind, job.spec.model or job.name, doc)

    def _parse_as(self, job_id: int, kind: str, name: str, doc: Mapping[str, Any] | None) -> SensitivityProfile:
        """The profile `doc` of job `job_id`, parsed once (a stored one is shared by its reusers)."""
        key = (job_id, kind)
        hit = self._parsed.get(key)
        if hit is None:
            assert doc is not None
            hit = SensitivityProfile.from_dict(name, doc)
            self._parsed[key] = hit
        return hit


def proportional_profile(job: JobRecord, cluster: Cluster) -> SensitivityProfile:
    """A profile saturating at the proportional share (or at the user's per-GPU hints)."""
    c, m, model, task = _knee(job, cluster)
    return knee_profile(model, task, c, m)


def starting_profile(job: JobRecord, own: SensitivityProfile, cluster: Cluster) -> SensitivityProfile:
    """What a job whose process is still starting is scheduled with (rounds.py): the
    proportional profile, so the round allocates it its share, at the pace its own profile
    gives it there, so the policy orders it as before (SRTF and FTF read the remaining time at
    the share; the bare proportional profile's pace made a starting heavy job look twice as
    short, and SRTF preempted a job placed a round earlier for it, then the reverse)."""
    knee = proportional_profile(job, cluster)
    c, m = cluster.proportional_share(1).cpus, cluster.proportional_share(1).mem_gb
    pace = own.speed(c, m)
    if not pace > 0:
        return knee
    return replace(knee, iter_time_s=own.iter_time_s * knee.speed(c, m) / pace, source=f"{own.source}, starting")


def _knee(job: JobRecord, cluster: Cluster) -> tuple[float, float, str, str]:
    """(CPUs per GPU, GB per GPU, model, task) of the proportional profile for `job`."""
    share = cluster.proportional_share(1)
    # A CPU-only job (0 GPUs) has a profile only because every core Job carries one; the
    # core never reads it, so any valid stand-in does: its request counts as one GPU's.
    gpus = max(job.spec.gpus, 1)
    c = job.spec.cpus_hint / gpus if job.spec.cpus_hint > 0 else share.cpus
    m = job.spec.mem_gb_hint / gpus if job.spec.mem_gb_hint > 0 else share.mem_gb
    return max(c, 0.01), max(m, 0.01), job.spec.model or "unprofiled", job.spec.task or "image"
