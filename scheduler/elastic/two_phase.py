"""Lyra's two-phase allocation (§5.2) in front of any Synergy mechanism.

Phase one: in the policy's order, every job whose base demand (an elastic job's minimum,
any other job's size) still fits the free GPUs becomes runnable, as `runnable_by_gpu`
decides for fixed jobs. Phase two: the GPUs left go to the runnable elastic jobs' flexible
demand by the multiple-choice knapsack, running jobs included (the shell hands them in as
active jobs like any other). The mechanism then places every runnable job at its decided
size: TUNE packs largest first on the best-fit server, consolidated where possible (Lyra's
best-fit decreasing), and sizes every worker's CPU and memory as it does for fixed jobs.

A running elastic job changes size only through a relaunch (stop at an agreed step,
checkpoint, restart at the new size), which costs it time: its current size is credited
`RESCALE_COST_S` in the knapsack, so sizes do not flip-flop as remaining times shift and a
rescale happens only when it saves more than it costs.

If the grown sizes leave a job unplaced that fitted at its base (fragmentation: GPUs were
counted, not placed), the round falls back to the base sizes, so elasticity never costs a
job its turn.
"""
from __future__ import annotations

import copy
from dataclasses import replace
from typing import Mapping, Sequence

from synergy.scheduler.elastic import mckp
from synergy.scheduler.elastic.scaling import base_gpus, flexible_items, is_elastic
from synergy.scheduler.mechanisms.base import Mechanism
from synergy.scheduler.model import Cluster, Job, JobKind, RoundInput, RoundOutput
from synergy.scheduler.throughput import proportional_speed

#: What one rescale costs a job, in seconds of completion time: Lyra measured 63 s on
#: average to checkpoint, stop, relaunch and restore (§7, testbed preemption overhead).
RESCALE_COST_S = 63.0


def decide_sizes(
    ordered: Sequence[Job], cluster: Cluster, free_gpus: float, current: Mapping[int, int] | None = None,
    rescale_cost_s: float = RESCALE_COST_S,
) -> dict[int, int]:
    """GPUs per runnable job after both phases (jobs absent from it wait).

    `current`: the GPUs each running job holds now; keeping them is worth `rescale_cost_s`.
    """
    current = current or {}
    sizes: dict[int, int] = {}
    left = int(free_gpus + 1e-9)
    for job in ordered:  # phase one: `runnable_by_gpu` on the base demands
        need = base_gpus(job)
        if need <= left:
            sizes[job.id] = need
            left -= need
    flexible = [j for j in ordered if j.id in sizes and is_elastic(j)] if left > 0 else []
    speeds: dict[int, float] = {}  # the proportional speed depends on the profile alone
    groups = []
    for job in flexible:
        key = id(job.profile)
        if key not in speeds:
            speeds[key] = proportional_speed(job, cluster)
        items = flexible_items(job, cluster, speeds[key])
        held = current.get(job.id, 0) - sizes[job.id]
        if held > 0 and rescale_cost_s > 0:  # "no item" (held == 0) is the base: shift the rest
            items = [replace(it, value=it.value + rescale_cost_s) if it.weight == held else it for it in items]
        elif held == 0 and job.id in current and rescale_cost_s > 0:
            items = [replace(it, value=it.value - rescale_cost_s) for it in items]
        groups.append([it for it in items if it.value > 0])
    for job, items, pick in zip(flexible, groups, mckp.solve(groups, left)):
        if pick >= 0:
            sizes[job.id] += items[pick].weight
    return sizes


def allocate(mechanism: Mechanism, ordered: Sequence[Job], inp: RoundInput) -> RoundOutput:
    """The mechanism's round with elastic jobs sized by the two phases.

    Without elastic jobs this is exactly `mechanism.allocate(ordered, inp)`.
    """
    # The kinds first: a set built in one pass, no call per job (this runs every round).
    if JobKind.ELASTIC not in {j.kind for j in ordered} or not any(is_elastic(j) for j in ordered):
        return mechanism.allocate(ordered, inp)
    current = {jid: int(a.total.gpus) for jid, a in inp.previous.items()}
    sizes = decide_sizes(ordered, inp.cluster, inp.cluster.total.gpus, current)
    grown = [_at(j, sizes.get(j.id, base_gpus(j))) for j in ordered]
    out = mechanism.allocate(grown, _with_jobs(inp, grown))
    if all(jid in out.allocations for jid in sizes):
        return out
    base = [_at(j, base_gpus(j)) for j in ordered]
    return mechanism.allocate(base, _with_jobs(inp, base))


def _at(job: Job, gpus: int) -> Job:
    """The job as the mechanism should place it this round: `gpus` GPUs (a shallow copy;
    the shell's job is never written)."""
    if gpus == job.gpus:
        return job
    view = copy.copy(job)
    view.gpus = gpus
    return view


def _with_jobs(inp: RoundInput, jobs: list[Job]) -> RoundInput:
    return RoundInput(inp.now_s, inp.cluster, jobs, inp.previous, inp.round_s, inp.heartbeat_window_s)
