"""The scheduling core: one round = filters pick the servers, the policy orders, the mechanism packs.

Pure and deterministic: no clock, no threads, no I/O. The daemon calls `Scheduler.schedule`
at every round boundary with the real time; the simulator calls it with simulated time.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from synergy.scheduler.arrays.cpu_array import ArrayDecision, CpuArray, is_cpu_server, schedule_cpu_array
from synergy.scheduler.elastic.scaling import base_gpus
from synergy.scheduler.loaning.passes import place_on_loaned, split_loaned
from synergy.scheduler.mechanisms.base import Mechanism
from synergy.scheduler.mechanisms.leftover import hand_out, taken_back
from synergy.scheduler.model import EPS, Allocation, Cluster, Job, JobKind, Resources, RoundInput, RoundOutput
from synergy.scheduler.placement import gpu_types
from synergy.scheduler.placement.filters import DEFAULT_FILTERS, Admit, Filter, Verdict, run_filters
from synergy.scheduler.placement.migration import Relabeller, relabel_to_previous, why_moved
from synergy.scheduler.placement.packing import pack_per_type
from synergy.scheduler.placement.steady import as_before
from synergy.scheduler.placement.surplus import stay_on_surplus
from synergy.scheduler.policies.base import Policy
from synergy.scheduler.profiles.pairs import PairTable

#: At most this many filter reasons are quoted in one waiting reason.
MAX_REASONS = 3
#: Job kinds that take GPUs (the mechanism's pass); CPU_ONLY jobs have their own.
GPU_KINDS = (JobKind.TRAINING, JobKind.ELASTIC)


@dataclass(frozen=True)
class Scheduler:
    policy: Policy
    mechanism: Mechanism
    #: Which servers may host what this round (placement/filters.py), run on every server.
    filters: tuple[Filter, ...] = DEFAULT_FILTERS
    #: After the mechanism: rename interchangeable servers so the fewest running jobs move
    #: (Tesserae §4.1, placement/migration.py); None places exactly as the mechanism did.
    relabel: Relabeller | None = relabel_to_previous
    #: CODA's CPU array: where CPU-only jobs run and how much they borrow (arrays/cpu_array.py).
    cpu_array: CpuArray = CpuArray()
    #: Tesserae's packing (placement/packing.py): pending jobs share the GPUs of placed ones
    #: when this pairwise profile says the pair gains; None = no GPU is ever shared.
    pairs: PairTable | None = None
    #: With a mechanism whose surplus above the GPU-proportional share is a bonus (it
    #: declares `redistribute`: TUNE, OPT), a job the plan moves off a node whose GPUs are
    #: still free, only because co-located jobs' surplus fills it, goes back there and
    #: those jobs are trimmed toward their share, when that costs those nodes no speed
    #: (placement/surplus.py). False: the relabelled plan as it is.
    stay_over_surplus: bool = True
    #: A round whose plan places exactly last round's jobs keeps last round's layout
    #: (`as_before`); False lays it out afresh each round, as relabelling alone did.
    stay_as_before: bool = True

    def schedule(self, inp: RoundInput) -> RoundOutput:
        # Seams: other pools (Lyra loans) get their own passes here; this release schedules
        # training jobs (fixed-size, and elastic ones sized by Lyra's two phases) on GPU
        # servers, then CODA's CPU array: CPU-only jobs on CPU servers and on what training
        # leaves (or holds above its proportional share) on GPU servers, then (TUNE) what is
        # still free to co-located jobs that speed up with it. On a typed cluster each job
        # runs on one GPU type it accepts (placement/gpu_types.py).
        verdicts = {s.id: run_filters(self.filters, s, inp) for s in inp.cluster.servers}
        jobs = [j for j in inp.jobs if j.kind in GPU_KINDS]
        by_id = {j.id: j for j in jobs}
        kept = _kept_in_place(jobs, inp.previous, verdicts)
        cluster = _open_cluster(inp.cluster, verdicts, kept)
        out = RoundOutput({})
        layout: Mapping[int, Allocation] | None = None  # the laid-out plan, when relabelled
        if cluster.servers:  # policies and mechanisms may assume at least one server
            ordered = self.policy.order([j for j in jobs if j.id not in kept], inp.now_s, cluster)
            if inp.last:
                ordered = behind_running(ordered, inp.last, inp.previous)
            own, loaned = split_loaned(cluster)  # Lyra: loaned servers take loanable jobs only
            if own.servers:
                out = gpu_types.allocate(self.mechanism, ordered, replace(inp, cluster=own, jobs=ordered))
            out = place_on_loaned(self.mechanism, ordered, inp, loaned, out)
            # Listing 1: place without sharing first, then pack the jobs still pending onto
            # placed ones, then relabel servers (a packed pair lives on the same servers, so
            # renaming moves it together).
            if self.pairs is not None and own.servers:
                out = replace(out, allocations=pack_per_type(out.allocations, ordered, own, self.pairs))
            if self.relabel is not None and inp.previous and own.servers:
                out, layout = self._lay_out(out, inp, own, by_id)
        # Every job a GPU job (the common round): no CPU-only job to look for.
        cpu_jobs = [] if len(jobs) == len(inp.jobs) else [j for j in inp.jobs if j.kind == JobKind.CPU_ONLY]
        array = _cpu_array_pass(self.cpu_array, inp, cpu_jobs, verdicts, out.allocations, kept, cluster)
        cpu_allocs, cpu_waiting = array.allocations, array.waiting
        training = array.training
        # Leftovers last (mechanisms/leftover.py): packed guests and CPU-only jobs have been
        # placed on what the demands leave, so CPU and memory nobody asked for never starve
        # them; they go to the jobs of the layout the round ends with.
        if getattr(self.mechanism, "redistribute", False) and training and cluster.servers:
            training = hand_out(training, by_id, cluster, cpu_allocs.values(), inp.previous)
        allocations = {**training, **kept}
        waiting = _waiting(inp.jobs, {**allocations, **cpu_allocs}, {**out.waiting, **cpu_waiting}, verdicts, cluster)
        # A move is explained by the plan that decided the layout.
        moves = why_moved({**(array.training if layout is None else layout), **kept}, inp.previous, cluster) \
            if inp.previous else {}
        return RoundOutput({**allocations, **cpu_allocs}, waiting, out.reverted, moves)

    def _lay_out(self, out: RoundOutput, inp: RoundInput, own: Cluster,
                 jobs: Mapping[int, Job]) -> tuple[RoundOutput, dict[int, Allocation]]:
        """The mechanism's plan on `own`, relabelled to keep jobs where they ran: (the plan at
        its demands, the plan as laid out, for `why_moved`).

        With leftovers (mechanisms/leftover.py) the layout is decided on the plan with its
        leftovers handed out: where they speed up a job, keeping them may be worth a move
        (relabelling and `stay_put` keep each job's share with them). A job whose GPUs where
        it ran are free and that only co-located jobs' surplus keeps out goes back when the
        surplus is worth nothing there (`stay_on_surplus`). Then the leftovers are taken
        back: they are handed out again on the final layout, after the CPU-only jobs.
        """
        leftovers = bool(getattr(self.mechanism, "redistribute", False))
        demands = out.allocations
        before = as_before(demands, inp.previous, own, jobs, leftovers) if self.stay_as_before else None
        if before is not None:
            return replace(out, allocations=before), {jid: inp.previous.get(jid, a) for jid, a in before.items()}
        plan = hand_out(demands, jobs, own) if leftovers else demands
        plan = self.relabel(plan, inp.previous, own) if self.relabel is not None else dict(plan)
        if leftovers and self.stay_over_surplus:
            plan = stay_on_surplus(plan, inp.previous, own, jobs, trimmable=jobs.keys())
        return replace(out, allocations=taken_back(plan, demands) if leftovers else plan), plan


def preload() -> None:
    """Import what the core loads on first use: scipy's assignment solver (placement's
    relabelling and packing), 0.3-0.4 s of CPU. For a process about to decide rounds (the
    daemon's decider worker, as it starts), so that the first round it decides does not pay
    for it. The core imports it lazily so that the CLI, which loads its registry, never does.
    """
    import scipy.optimize  # noqa: F401


def behind_running(ordered: Sequence[Job], last: frozenset[int], running: Mapping[int, Allocation]) -> list[Job]:
    """`ordered` with each job of `last` (stand-ins for jobs waiting for a profiling lease,
    `RoundInput.last`) that the policy ranks ahead of a job of `running` (last round's
    allocations) moved to just behind the last such job, the moved ones in policy order.

    Behind every running job, a stand-in takes no GPU a running job holds: an arrival does
    not preempt work to be profiled. Among the queued jobs it keeps the policy's rank: ranked
    after every job (the rule before), an arrival waited for every queued job under SRTF or
    LAS, up to 487 s in a loaded physical run where it would have waited 16 s at its own rank
    (docs/reproducing.md, issue 14)."""
    cut = -1
    for k, job in enumerate(ordered):
        if job.id in running and job.id not in last:
            cut = k
    early = [j for j in ordered[:cut + 1] if j.id in last]
    if not early:
        return list(ordered)
    return [*(j for j in ordered[:cut + 1] if j.id not in last), *early, *ordered[cut + 1:]]


def _cpu_array_pass(
    config: CpuArray, inp: RoundInput, jobs: Sequence[Job], verdicts: Mapping[str, Verdict],
    training: Mapping[int, Allocation], kept: Mapping[int, Allocation], cluster: Cluster,
) -> ArrayDecision:
    """CODA's CPU array after training has decided (arrays/cpu_array.py).

    Users' DRF rather than the policy's order: the policies rank by GPU-time quantities
    (attained GPU-seconds, per-GPU shares) that a zero-GPU job does not have. Only the
    mechanism's allocations may be trimmed; jobs kept on held servers are left as they are.
    """
    if not jobs:  # `jobs`: the CPU-only jobs of `inp`
        return ArrayDecision(dict(training))
    open_ids = [s for s, v in verdicts.items() if v.admit == Admit.ANY]
    held_ids = [s for s, v in verdicts.items() if v.admit == Admit.HELD]
    training_jobs = {j.id: j for j in inp.jobs if j.id in training}
    return schedule_cpu_array(config, jobs, inp.cluster, cluster, training, training_jobs, kept, inp.previous,
                              open_ids, held_ids)


def _kept_in_place(
    jobs: Sequence[Job], previous: Mapping[int, Allocation], verdicts: Mapping[str, Verdict]
) -> dict[int, Allocation]:
    """Running jobs with a share on a HELD server (and none on a closed or unknown one):
    they keep their whole previous allocation, untouched by the mechanism."""
    kept: dict[int, Allocation] = {}
    if all(v.admit != Admit.HELD for v in verdicts.values()):
        return kept  # no server holds jobs in place: the common round, asked every time
    for job in jobs:
        prev = previous.get(job.id)
        if prev is None or not prev.placements:
            continue
        admits = [verdicts[p.server_id].admit if p.server_id in verdicts else Admit.NONE for p in prev.placements]
        if Admit.HELD in admits and Admit.NONE not in admits:
            kept[job.id] = prev
    # A packed job kept without its host (gone or finished) holds those GPUs alone now.
    for jid, alloc in kept.items():
        if alloc.packed_with is not None and alloc.packed_with not in kept:
            kept[jid] = replace(alloc, packed_with=None)
    return kept


def _open_cluster(cluster: Cluster, verdicts: Mapping[str, Verdict], kept: Mapping[int, Allocation]) -> Cluster:
    """The servers that take new work, less what kept jobs hold on them."""
    held: dict[str, Resources] = {}
    for alloc in kept.values():
        for sid, res in alloc.held:  # a packed pair's GPUs count once
            held[sid] = held.get(sid, Resources()) + res
    servers = []
    for s in cluster.servers:
        if verdicts[s.id].admit != Admit.ANY or is_cpu_server(s):  # the CPU array's alone
            continue
        if s.id in held:
            left = s.capacity - held[s.id]
            s = replace(s, capacity=Resources(max(0.0, left.gpus), max(0.0, left.cpus), max(0.0, left.mem_gb)))
        servers.append(s)
    if len(servers) == len(cluster.servers) and not held:
        return cluster  # the common case: the very same object, so cached totals survive
    # The GPU-proportional share stays the whole cluster's: a cordoned node or a kept job's
    # share taken out here must not change what "never slower than proportional" means.
    return Cluster(tuple(servers), share_basis=cluster.share_basis or cluster.servers)


def _waiting(
    jobs: Sequence[Job],
    allocations: Mapping[int, Allocation],
    decided: Mapping[int, str],
    verdicts: Mapping[str, Verdict],
    cluster: Cluster,
) -> dict[int, str]:
    """Why each job without an allocation waits: the filters' reasons when they are the
    cause (no server left, or too few GPUs on those left), else the mechanism's."""
    closed = [v.reason for v in verdicts.values() if v.admit != Admit.ANY]
    note = "; ".join(closed[:MAX_REASONS]) + (f"; and {len(closed) - MAX_REASONS} more" if len(closed) > MAX_REASONS else "")
    total = cluster.total.gpus if cluster.servers else 0.0
    waiting: dict[int, str] = {}
    for j in jobs:
        if j.id in allocations:
            continue
        if j.kind == JobKind.TRAINING and cluster.servers and j.gpus <= total + EPS:
            # The long queue of a busy round: the last branch below, asked before the rest.
            waiting[j.id] = decided.get(j.id, "not chosen this round")
        elif j.kind == JobKind.CPU_ONLY:
            waiting[j.id] = decided.get(j.id, "not chosen this round")
        elif j.kind not in GPU_KINDS:
            waiting[j.id] = f"job kind {j.kind.value!r} is not scheduled by this release"
        elif not cluster.servers:
            # Open servers that are all GPU-less (the CPU array's) are not "none registered".
            gpu_less = len(verdicts) - len(closed)
            why = note or (f"only GPU-less nodes ({gpu_less}), which run CPU-only jobs" if gpu_less
                           else "none registered")
            waiting[j.id] = f"no schedulable node: {why}"
        elif base_gpus(j) > total + EPS:
            waiting[j.id] = f"needs {base_gpus(j)} GPUs; the schedulable nodes have {total:g} in total" + (
                f" ({note})" if note else ""
            )
        else:
            waiting[j.id] = decided.get(j.id, "not chosen this round")
    return waiting
