"""Heterogeneous GPU types (Synergy §6): each job to one GPU type, the mechanism per type.

A job runs on one GPU type (its ranks run at the pace of the slowest, so a job never mixes
types) and only on a type it accepts (`Job.gpu_types`, empty = any). A round on a typed
cluster therefore has two steps:

1. Type choice, in the policy's order: a job takes the first of its accepted types, fastest
   first (its speed at that type's GPU-proportional share, ties by name), that still has
   enough GPUs for it after higher-priority jobs, counting GPUs as `runnable_by_gpu` does.
   So no GPU of a type a job accepts idles while that job waits for GPUs it would fit in,
   and a job accepting V100 and T4 lands on the V100s while they are free. A mechanism may
   choose the types itself (`TypeChooser`; Synergy-OPT solves the job x type program).
2. Per type, the mechanism runs on that type's servers alone, whose GPU-proportional share is
   the type's (`Cluster.of_type`), with every job seen through its profile on the type
   (`SensitivityProfile.on`): TUNE sizes the demand with the type's speed and grid, and its
   "never below proportional" holds against the share of the type the job lands on.

An untyped cluster with untyped jobs skips all this: exactly one mechanism call, as before.
"""
from __future__ import annotations

import copy
from dataclasses import replace
from typing import Mapping, Protocol, Sequence, runtime_checkable

from synergy.scheduler.elastic import two_phase
from synergy.scheduler.elastic.scaling import base_gpus
from synergy.scheduler.mechanisms.base import Mechanism
from synergy.scheduler.model import EPS, Allocation, Cluster, Job, RoundInput, RoundOutput
from synergy.scheduler.throughput import proportional_per_gpu


@runtime_checkable
class TypeChooser(Protocol):
    """A mechanism that picks each runnable job's GPU type itself (OPT)."""

    def choose_types(self, ordered: Sequence[Job], types: Mapping[str, Cluster],
                     greedy: Mapping[int, str]) -> dict[int, str]:
        """Job id -> type for the jobs of `greedy` (the greedy choice, which fits by GPU count)."""
        ...


def accepts(job: Job, gpu_type: str) -> bool:
    """Whether `job` may run on a GPU of `gpu_type` (the one definition of the rule)."""
    return not job.gpu_types or gpu_type in job.gpu_types


def on_type(job: Job, gpu_type: str) -> Job:
    """The job as the mechanism sees it on `gpu_type`: its profile on that type (a shallow
    copy; the shell's job is never written). The job itself when the type changes nothing."""
    profile = job.profile.on(gpu_type)
    if profile is job.profile:
        return job
    view = copy.copy(job)
    view.profile = profile
    return view


def preference(job: Job, types: Mapping[str, Cluster]) -> list[str]:
    """The types of `types` that `job` accepts, fastest first (at each type's proportional
    share), ties by name."""
    ok = [t for t in types if accepts(job, t)]
    if len(ok) <= 1:
        return ok
    speed = {t: job.profile.speed_on(t, *proportional_per_gpu(types[t])) for t in ok}
    return sorted(ok, key=lambda t: (-speed[t], t))


def is_typed(cluster: Cluster, jobs: Sequence[Job]) -> bool:
    return cluster.typed or any(j.gpu_types for j in jobs)


def allocate(mechanism: Mechanism, ordered: Sequence[Job], inp: RoundInput) -> RoundOutput:
    """The mechanism's round (Lyra's two phases included) on `inp.cluster`, per GPU type."""
    if not is_typed(inp.cluster, ordered):
        return two_phase.allocate(mechanism, ordered, inp)
    types = {t: inp.cluster.of_type(t) for t in inp.cluster.gpu_types}
    chosen, waiting = choose_greedy(ordered, types)
    if isinstance(mechanism, TypeChooser) and chosen:
        chosen = mechanism.choose_types(ordered, types, chosen)
    allocations: dict[int, Allocation] = {}
    reverted: set[int] = set()
    for t, sub in types.items():
        jobs = [on_type(j, t) for j in ordered if chosen.get(j.id) == t]
        if not jobs:
            continue
        part = two_phase.allocate(mechanism, jobs, replace(inp, cluster=sub, jobs=jobs))
        allocations.update(part.allocations)
        waiting.update(part.waiting)
        reverted |= part.reverted
    return RoundOutput(allocations, waiting, frozenset(reverted))


def choose_greedy(ordered: Sequence[Job], types: Mapping[str, Cluster]) -> tuple[dict[int, str], dict[int, str]]:
    """Step 1 of the module doc: (job id -> type, job id -> why it waits)."""
    left = {t: sub.total.gpus for t, sub in types.items()}
    chosen: dict[int, str] = {}
    waiting: dict[int, str] = {}
    prefs: dict[tuple[int, frozenset[str]], list[str]] = {}  # per (profile, accepted types)
    for job in ordered:
        key = (id(job.profile), job.gpu_types)
        if key not in prefs:
            prefs[key] = preference(job, types)
        order = prefs[key]
        need = base_gpus(job)
        pick = next((t for t in order if need <= left[t] + EPS), None)
        if pick is not None:
            chosen[job.id] = pick
            left[pick] -= need
        elif not order:
            have = ", ".join(sorted(t or "untyped" for t in types)) or "none"
            waiting[job.id] = (f"accepts GPU types {', '.join(sorted(job.gpu_types))}; no schedulable node has one "
                               f"(schedulable: {have})")
        else:
            free = ", ".join(f"{max(0, int(round(left[t])))} {t or 'untyped'}" for t in order)
            waiting[job.id] = f"waiting for {need} GPUs of one type: {free} left after higher-priority jobs"
    return chosen, waiting

