"""The event loop: simulated time, the scheduling core, and nothing else.

Time advances over three kinds of events: arrivals (admitted at the next round boundary),
round boundaries (where `Scheduler.schedule` decides the next round, exactly as the daemon
does), and completions (at the exact instant a job's last iteration ends; its resources
stay idle until the next boundary, as they would with leases).

Between boundaries a running job advances at `iterations_per_s(job, landed_speed(job, alloc, cluster))`
(its speed on the GPU type it landed on; the reference GPU's on an untyped cluster).
Progress is kept as (rate, t0, done0): the work done at time t is done0 + rate * (t - t0),
re-based only when the job's rate changes. The answer therefore does not depend on how
many boundaries the loop visits, which is what makes skipping idle boundaries exact.

What running jobs hold is one step function (`SimResult.timeline`): per resource what is
*allocated*, and for CPU and memory also what is *used*, min(allocated, what the job can
consume), the latter being its saturating demand (`profile.best_case()`, no floor) per GPU
times its GPUs. A job's share is computed once per allocation change and the totals are
updated incrementally, so utilisation costs nothing per skipped round.

Memoisation (on by default, `memoise=False` turns it off for checking): the core is not
called when its answer is provably the one it gave last time. That holds when
  * the mechanism's allocations depend only on the policy's ordered list of jobs and on
    the jobs' static fields (id, GPUs, profile), never on progress, time or `previous`
    (mechanisms that declare `order_only`), and
  * the policy returns the same order: for policies that declare `static_order` that is
    whenever the set of active jobs is unchanged; for others the order is computed and
    compared.
With a static-order policy the loop then jumps straight to the next boundary at which an
arrival or a completion changes the set, so a stretch of identical rounds costs O(1).
tests/test_simulator.py runs every policy and mechanism with and without memoisation and
requires identical results.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from synergy.scheduler.core import Scheduler
from synergy.scheduler.elastic.scaling import scale
from synergy.scheduler.loaning.orchestrator import rebalance
from synergy.scheduler.loaning.reclaim import shrunk_allocation
from synergy.scheduler.mechanisms.base import runnable_by_gpu
from synergy.scheduler.model import Allocation, Cluster, Job, JobKind, RoundInput, RoundOutput, ServerPool
from synergy.scheduler.simulator.inference import InferencePool
from synergy.scheduler.simulator.profiling import Leases, ProfilingReplay, at_share, profiling_round
from synergy.scheduler.placement.migration import migrated
from synergy.scheduler.profiles.pairs import PairTable
from synergy.scheduler.throughput import iterations_per_s, packed_speed

#: Columns of a `SimResult.timeline` row after its time: allocated GPUs, CPUs and GB, then
#: the CPUs and GB the running jobs can actually use (their allocation capped at saturation).
USAGE_COLUMNS: tuple[str, ...] = ("gpu", "cpu", "mem", "cpu_used", "mem_used")
#: For each usage column, the index in `SimResult.capacity` it is a fraction of.
USAGE_CAPACITY: tuple[int, ...] = (0, 1, 2, 1, 2)
Usage = tuple[float, float, float, float, float]
_NO_USAGE: Usage = (0.0, 0.0, 0.0, 0.0, 0.0)

DEFAULT_ROUND_S = 300.0
#: Safety stop: two simulated years, far beyond any sensible experiment.
DEFAULT_MAX_TIME_S = 2 * 365 * 24 * 3600.0


@dataclass(frozen=True)
class EngineConfig:
    round_s: float = DEFAULT_ROUND_S
    max_time_s: float = DEFAULT_MAX_TIME_S
    #: The run ends once these jobs have completed; None means every job.
    stop_after: frozenset[int] | None = None
    memoise: bool = True
    #: Seconds of work a job redoes when it migrates (its GPUs change between consecutive
    #: rounds: restart, reload, progress since its checkpoint); below `round_s`. Preemption
    #: and resumption stay free, as before.
    migration_cost_s: float = 0.0
    #: Lyra's capacity loaning: an inference pool whose idle servers are loaned each round
    #: and reclaimed when its demand rises (None: a fixed cluster). Turns memoisation off.
    inference: InferencePool | None = None
    #: Replay the profiling phase (simulator/profiling.py: leases placed by the daemon's core
    #: rule, then the job runs on); None: every job's profile is known on arrival, as before.
    #: Turns memoisation off.
    profiling: ProfilingReplay | None = None
    #: Seconds a job makes no progress each time its process starts (Python and framework
    #: start-up, loading its checkpoint): at its first start, after a preemption and after
    #: a migration (on top of `migration_cost_s`). It holds its allocation meanwhile, so
    #: later jobs queue behind it as they do on a real cluster. 0: jobs run at once.
    start_cost_s: float = 0.0
    #: Jobs the scheduler never learns a profile for (`profiler: none` on a live cluster):
    #: the core sees them at their proportional share with the unknown pace (the daemon's
    #: stand-in, so SRTF orders them by remaining iterations), while they progress at the
    #: speed their own profile gives. Turns memoisation off.
    unprofiled: frozenset[int] = frozenset()


@dataclass
class JobRecord:
    id: int
    model: str
    gpus: int
    arrival_s: float
    first_start_s: float | None = None
    completion_s: float | None = None
    #: Times its GPUs changed between consecutive rounds while it ran (Tesserae's migrations).
    migrations: int = 0

    @property
    def jct_s(self) -> float | None:
        return None if self.completion_s is None else self.completion_s - self.arrival_s


@dataclass
class LoanStats:
    """What capacity loaning did over a run (Lyra §7.3)."""

    #: Servers lent to training and taken back, counted one per server.
    loans: int = 0
    reclaims: int = 0
    #: Running jobs stopped because a server they used was reclaimed.
    preemptions: int = 0
    #: Elastic jobs scaled in instead (each also one migration: a rescale's relaunch).
    shrinks: int = 0
    #: GPU-seconds of loaned servers on loan, and of them the ones jobs held.
    loaned_gpu_s: float = 0.0
    loaned_busy_gpu_s: float = 0.0


@dataclass
class SimResult:
    records: dict[int, JobRecord]
    capacity: tuple[float, float, float]
    #: Step function (time, *Usage) in USAGE_COLUMNS order: each row holds until the next.
    timeline: list[tuple[float, ...]]
    end_s: float
    #: Round boundaries passed with jobs in the system, and how many called the core.
    rounds: int
    decisions: int
    #: "completed", "time_limit" (max_time_s reached) or "stalled" (nothing can ever run).
    stopped: str
    unfinished: tuple[int, ...] = field(default_factory=tuple)
    #: Migrations over the whole run (jobs whose GPUs changed between consecutive rounds).
    migrations: int = 0
    #: Capacity loaning's counts; None without an inference pool.
    loaning: LoanStats | None = None
    #: Typed clusters: the GPU types, their GPU counts, and a step function (time, allocated
    #: GPUs per type in that order); empty on an untyped cluster.
    gpu_types: tuple[str, ...] = ()
    type_gpus: tuple[float, ...] = ()
    type_timeline: list[tuple[float, ...]] = field(default_factory=list)
    #: Packing (Tesserae §4.2): the sum over rounds passed of jobs packed onto another's
    #: GPUs, and the jobs that ever were.
    packed_job_rounds: int = 0
    packed_jobs: int = 0


class _Running:
    """A job holding an allocation: its progress line and what it holds."""

    __slots__ = ("job", "rate", "t0", "done0", "att0", "finish", "k_done", "held", "alloc", "started", "partner")

    def __init__(self, job: Job, t0: float) -> None:
        self.job = job
        self.rate = 0.0
        self.t0 = t0
        self.done0 = job.done_iterations
        self.att0 = job.attained_gpu_s
        self.finish = math.inf
        self.k_done = math.inf
        self.held: Usage = _NO_USAGE
        self.alloc: Allocation | None = None
        #: When it last (re)started: its checkpoints fall every `checkpoint_s` from here.
        self.started = t0
        #: The job sharing its GPUs (packing), as host or guest; None alone.
        self.partner: Job | None = None

    def rebase(self, t: float) -> None:
        self.done0 += self.rate * (t - self.t0)
        self.att0 += self.job.gpus * (t - self.t0)
        self.t0 = t

    def materialise(self, t: float) -> None:
        """Write progress at time t into the Job, which is what the core reads (none while
        it is still starting: its line starts below zero, `EngineConfig.start_cost_s`)."""
        self.job.done_iterations = max(0.0, self.done0 + self.rate * (t - self.t0))
        self.job.attained_gpu_s = self.att0 + self.job.gpus * (t - self.t0)


class Simulation:
    """One run over one workload. Jobs are mutated (progress) and must not be shared."""

    def __init__(self, scheduler: Scheduler, cluster: Cluster, jobs: Sequence[Job],
                 config: EngineConfig = EngineConfig()) -> None:
        if config.round_s <= 0:
            raise ValueError("round_s must be positive")
        if config.profiling is not None and config.inference is not None:
            raise ValueError("the profiling phase is not replayed with capacity loaning")
        self.scheduler = scheduler
        self.cluster = cluster
        self.config = config
        self.pending = sorted(jobs, key=lambda j: (j.arrival_s, j.id))
        self.records = {j.id: JobRecord(j.id, j.model, j.gpus, j.arrival_s) for j in jobs}
        total = cluster.total
        self.capacity = (float(total.gpus), float(total.cpus), float(total.mem_gb))
        # Plug-ins opt in to memoisation by declaring it (see the module docstring). Elastic
        # jobs opt out: their sizes depend on remaining time and on `previous`.
        self.order_only = bool(getattr(scheduler.mechanism, "order_only", False)) and not any(
            j.kind in (JobKind.ELASTIC, JobKind.CPU_ONLY) for j in jobs)
        # CPU-only jobs opt out too: the CPU array keeps running ones in place (`previous`).
        self.static_order = bool(getattr(scheduler.policy, "static_order", False))
        #: Neither plug-in reads done_iterations/attained_gpu_s, so with memoisation on they
        #: are not written into the Jobs before each call (they are at every completion).
        self.progress_blind = config.memoise and self.order_only and self.static_order
        #: Rounds after arrivals alone may reuse the last answer when no arrival is runnable
        #: (`_passed_over`): the mechanism packs only `runnable_by_gpu`'s jobs, the policy's
        #: order is per-job (an arrival never reorders the others), and nothing else reads
        #: the queue: no packing (a pending job may share GPUs), no GPU types (the type
        #: choice counts GPUs per type, not over the cluster), no profiling replay (an
        #: arrival takes a lease) and no loaning (the cluster itself changes).
        self.skip_arrivals = (self.progress_blind and bool(getattr(scheduler.mechanism, "runnable_only", False))
                              and scheduler.pairs is None and not cluster.typed
                              and not any(j.gpu_types for j in jobs)
                              and config.profiling is None and config.inference is None)
        self.migrations = 0
        self.pairs: PairTable | None = scheduler.pairs
        self.packed_now = 0
        self.packed_ever: set[int] = set()
        # Capacity loaning: the training servers, and the inference servers on loan now.
        self.training = cluster
        self.loaned: tuple[str, ...] = ()
        self.loan_stats = LoanStats() if config.inference is not None else None
        # Per-type GPU usage (typed clusters only; the untyped path pays nothing for it).
        self.gpu_types = cluster.gpu_types if cluster.typed else ()
        self.type_gpus = tuple(cluster.of_type(t).total.gpus for t in self.gpu_types)
        self.type_timeline: list[tuple[float, ...]] = [(0.0, *(0.0 for _ in self.gpu_types))] if self.gpu_types else []
        #: Profiling leases under way and jobs profiled (config.profiling only).
        self.leases = Leases({})

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> SimResult:
        cfg = self.config
        R = cfg.round_s
        pending = self.pending
        n = len(pending)
        stop_ids = cfg.stop_after if cfg.stop_after is not None else frozenset(self.records)
        left = len(stop_ids & self.records.keys())
        k_limit = self._boundary(cfg.max_time_s)
        memo = (cfg.memoise and self.order_only and cfg.inference is None and cfg.profiling is None
                and not cfg.unprofiled)

        active: dict[int, Job] = {}
        running: dict[int, _Running] = {}
        timeline: list[tuple[float, ...]] = [(0.0, *_NO_USAGE)]
        version = 0  # bumps whenever the active set changes
        last_version, last_order = -1, None
        #: Jobs arrived since the core was last called, while nothing else changed; None
        #: once something else did (a completion, a loan) or before the first call.
        arrived: list[Job] | None = None
        previous: dict[int, Allocation] = {}
        rounds = decisions = 0
        stopped, end_s = "completed", 0.0
        p, k = 0, 0
        packed_job_rounds = 0

        while left > 0:
            t = k * R
            while p < n and pending[p].arrival_s <= t:
                job = pending[p]
                active[job.id] = job
                p += 1
                version += 1
                if arrived is not None:
                    arrived.append(job)
            if not active:
                if p == n:
                    stopped = "stalled"  # defensive: measured jobs always arrive
                    break
                k = self._boundary(pending[p].arrival_s)
                continue
            if k >= k_limit:
                stopped = "time_limit"
                break
            if cfg.inference is not None:
                rebalanced = self._rebalance(t, running, previous)
                if rebalanced is not None:
                    previous = rebalanced
                    version += 1
                    arrived = None

            # Decide the round, or prove that the last decision still holds.
            out: RoundOutput | None = None
            if not memo:
                out = self._call_core(t, active, running, previous)
            elif self.static_order:
                if version != last_version:
                    if self.skip_arrivals and arrived and self._passed_over(arrived, active, t):
                        last_version = version  # the last answer still holds
                    else:
                        out = self._call_core(t, active, running, previous)
            else:
                for r in running.values():
                    r.materialise(t)
                order = tuple(j.id for j in self.scheduler.policy.order(list(active.values()), t, self.cluster))
                if version != last_version or order != last_order:
                    out = self._call_core(t, active, running, previous)
                last_order = order
            if out is not None:
                decisions += 1
                last_version = version
                arrived = []
                previous = out.allocations
                self._apply(out, t, active, running, timeline)

            # The next boundary at which anything can change.
            if not running:
                # An idle cluster on which the core placed nothing stays so until a job
                # arrives (placing on an empty cluster does not depend on the order).
                if p == n:
                    stopped = "stalled"
                    break
                k_next = max(k + 1, self._boundary(pending[p].arrival_s))
            elif memo and self.static_order:
                k_next = min(r.k_done for r in running.values())
                if p < n:
                    k_next = min(k_next, self._boundary(pending[p].arrival_s))
                k_next = max(k + 1, k_next)
            else:
                k_next = k + 1
            k_next = min(k_next, max(k + 1, k_limit))
            rounds += k_next - k
            packed_job_rounds += self.packed_now * (k_next - k)
            if self.loan_stats is not None:
                self._account_loaned(t, k_next * R, running)

            # Completions before that boundary, in time order.
            done = [r for r in running.values() if r.k_done <= k_next]
            if done:
                done.sort(key=lambda r: (r.finish, r.job.id))
                g, c, m, cu, mu = timeline[-1][1:]
                for r in done:
                    job = r.job
                    job.done_iterations = job.iterations
                    job.attained_gpu_s = r.att0 + job.gpus * (r.finish - r.t0)
                    self.records[job.id].completion_s = r.finish
                    del running[job.id]
                    del active[job.id]
                    h = r.held
                    g, c, m, cu, mu = g - h[0], c - h[1], m - h[2], cu - h[3], mu - h[4]
                    timeline.append((r.finish, g, c, m, cu, mu))
                    if self.gpu_types:
                        self._account_types(r.finish, [(x.alloc, x.held[0]) for x in running.values()])
                    end_s = max(end_s, r.finish)
                    if job.id in stop_ids:
                        left -= 1
                version += 1
                arrived = None
            k = k_next

        unfinished = tuple(sorted(i for i in stop_ids if i in self.records and self.records[i].completion_s is None))
        if stopped == "time_limit":
            end_s = max(end_s, k * R)
        return SimResult(self.records, self.capacity, timeline, end_s, rounds, decisions, stopped, unfinished,
                         self.migrations, self.loan_stats, self.gpu_types, self.type_gpus, self.type_timeline,
                         packed_job_rounds, len(self.packed_ever))

    # -- helpers -----------------------------------------------------------------------------
    def _boundary(self, t: float) -> int:
        """Index of the first round boundary at or after t (the one test used everywhere)."""
        if math.isinf(t):
            return 1 << 62
        R = self.config.round_s
        k = math.ceil(t / R)
        if k > 0 and (k - 1) * R >= t:
            k -= 1
        elif k * R < t:
            k += 1
        return k

    def _rebalance(self, t: float, running: dict[int, _Running],
                   previous: dict[int, Allocation]) -> dict[int, Allocation] | None:
        """Apply the orchestrator's decision at `t`; what the jobs hold after it (the core's
        `previous`), None if nothing changed.

        A preempted job loses the work done since its last checkpoint (one every
        `checkpoint_s` of running since it last started) and waits for the core like any
        other. An elastic job the plan scales in keeps running on its kept servers at its
        new size: a rescale, charged as the core's rescales are (a migration: it redoes
        `migration_cost_s` of work, counted in the job's and the run's migrations). The
        cluster the core sees is the training servers plus those on loan.
        """
        pool = self.config.inference
        assert pool is not None and self.loan_stats is not None
        held = {jid: a for jid, a in previous.items() if jid in running}  # completed jobs hold nothing
        jobs = {jid: running[jid].job for jid in held}
        decision = rebalance(pool.servers, self.loaned, pool.demand.at(t), held, jobs)
        if decision.loaned == self.loaned:
            return None
        stats = self.loan_stats
        stats.loans += len(decision.lent)
        after = dict(held)
        if decision.reclaim is not None:
            plan = decision.reclaim
            stats.reclaims += len(plan.servers)
            for jid in sorted(plan.preempted):
                r = running.pop(jid, None)
                after.pop(jid, None)
                if r is None:
                    continue
                stats.preemptions += 1
                r.rebase(t)
                r.done0 = max(0.0, r.done0 - r.rate * ((t - r.started) % pool.checkpoint_s))
                r.materialise(t)
            for jid, gpus in sorted(plan.shrunk.items()):
                alloc = shrunk_allocation(held[jid], plan.servers, gpus)
                after[jid] = alloc
                self._shrink(running[jid], alloc, t)
                stats.shrinks += 1
        self.loaned = decision.loaned
        on_loan = set(decision.loaned)
        self.cluster = Cluster(self.training.servers + tuple(s for s in pool.servers if s.id in on_loan))
        return after

    def _shrink(self, r: _Running, alloc: Allocation, t: float) -> None:
        """Run `r` on `alloc` from `t` on: a rescale (a migration with its redo cost)."""
        r.rebase(t)
        r.alloc = alloc
        r.held = _usage(r.job, alloc, self.cluster)
        r.rate = _rate(r.job, alloc, self.cluster, None, self.pairs)  # elastic jobs are never packed
        r.finish = r.t0 + (r.job.iterations - r.done0) / r.rate if r.rate > 0 else math.inf
        r.k_done = self._boundary(r.finish)
        self.migrations += 1
        self.records[r.job.id].migrations += 1
        self._redo(r, t)

    def _account_loaned(self, t: float, until: float, running: dict[int, _Running]) -> None:
        """Loaned GPU-seconds over [t, until), and those jobs hold (allocations are fixed there)."""
        stats = self.loan_stats
        assert stats is not None
        loaned = [s for s in self.cluster.servers if s.pool == ServerPool.LOANED]
        if not loaned:
            return
        stats.loaned_gpu_s += sum(s.capacity.gpus for s in loaned) * (until - t)
        ids = {s.id for s in loaned}
        for r in running.values():
            if r.alloc is None:
                continue
            g = sum(p.gpus for p in r.alloc.placements if p.server_id in ids)
            if g:
                stats.loaned_busy_gpu_s += g * max(0.0, min(r.finish, until) - t)

    def _passed_over(self, arrived: Sequence[Job], active: dict[int, Job], t: float) -> bool:
        """Whether `runnable_by_gpu` passes over every job of `arrived` at `t`: then the
        runnable jobs, and so the mechanism's answer, are those of the last call (a job
        passed over leaves the GPUs left for the jobs after it as they were)."""
        order = self.scheduler.policy.order(list(active.values()), t, self.cluster)
        runnable, _ = runnable_by_gpu(order, self.cluster.total.gpus)
        new = {j.id for j in arrived}
        return not any(j.id in new for j in runnable)

    def _call_core(self, t: float, active: dict[int, Job], running: dict[int, _Running],
                   previous: dict[int, Allocation]) -> RoundOutput:
        if not self.progress_blind:  # the policy may read progress (SRTF, LAS, FTF)
            for r in running.values():
                r.materialise(t)
        jobs = list(active.values())
        if self.config.unprofiled:
            seen = {j.id: j for j in at_share([j for j in jobs if j.id in self.config.unprofiled], self.cluster)}
            jobs = [seen.get(j.id, j) for j in jobs]
        inp = RoundInput(t, self.cluster, jobs, previous, self.config.round_s)
        if self.config.profiling is None:
            return self.scheduler.schedule(inp)
        out, self.leases = profiling_round(inp, self.config.profiling, self.leases, self.scheduler.schedule)
        return out

    def _apply(self, out: RoundOutput, t: float, active: dict[int, Job],
               running: dict[int, _Running], timeline: list[tuple[float, ...]]) -> None:
        allocs = out.allocations
        partners: dict[int, Job] = {}
        for jid, alloc in allocs.items():
            if alloc.packed_with is not None and alloc.packed_with in active:
                partners[jid] = active[alloc.packed_with]
                partners[alloc.packed_with] = active[jid]
                self.packed_ever.add(jid)
        self.packed_now = sum(1 for a in allocs.values() if a.packed_with is not None)
        for jid in [jid for jid in running if jid not in allocs]:
            r = running.pop(jid)  # preempted: progress stops here
            r.rebase(t)
            r.materialise(t)
        g = c = m = cu = mu = 0.0
        for jid, alloc in allocs.items():
            r = running.get(jid)
            started = r is None  # its process starts: first time, or after a preemption
            if started:
                job = active[jid]
                r = running[jid] = _Running(job, t)
                rec = self.records[jid]
                if rec.first_start_s is None:
                    rec.first_start_s = t
            # An equal allocation is no migration: the (costlier) GPU-map comparison only
            # runs for allocations that changed.
            changed = alloc is not r.alloc and alloc != r.alloc  # often last round's very object
            moved = changed and r.alloc is not None and migrated(r.alloc.placements, alloc.placements)
            partner = partners.get(jid)
            # An unchanged allocation and partner keep the job's rate and progress line.
            if changed or partner is not r.partner:
                r.alloc = alloc
                r.partner = partner
                r.held = _usage(r.job, alloc, self.cluster)
                rate = _rate(r.job, alloc, self.cluster, partner, self.pairs)
                if rate != r.rate:
                    r.rebase(t)
                    r.rate = rate
                    if rate > 0:
                        r.finish = r.t0 + (r.job.iterations - r.done0) / rate
                        r.k_done = self._boundary(r.finish)
                    else:
                        r.finish, r.k_done = math.inf, math.inf
            if moved:
                self.migrations += 1
                self.records[jid].migrations += 1
                self._redo(r, t)
            if started or moved:
                self._start(r)
            held = r.held
            g += held[0]
            c += held[1]
            m += held[2]
            cu += held[3]
            mu += held[4]
        if (g, c, m, cu, mu) != timeline[-1][1:]:
            timeline.append((t, g, c, m, cu, mu))
        if self.gpu_types:
            self._account_types(t, [(r.alloc, r.held[0]) for r in running.values()])

    def _account_types(self, t: float, held: list[tuple[Allocation | None, float]]) -> None:
        """A row of the per-type GPU step function: what the running jobs hold, by the type
        of the servers they run on."""
        col = {name: k for k, name in enumerate(self.gpu_types)}
        row = [0.0] * len(self.gpu_types)
        for alloc, gpus in held:
            if alloc is not None and alloc.placements:
                k = col.get(self.cluster.gpu_type_of(alloc.placements[0].server_id))
                if k is not None:
                    row[k] += gpus
        if tuple(row) != self.type_timeline[-1][1:]:
            self.type_timeline.append((t, *row))


    def _redo(self, r: _Running, t: float) -> None:
        """A migrated job redoes `migration_cost_s` of work at its new rate (never below none done)."""
        cost = self.config.migration_cost_s
        if cost <= 0 or r.rate <= 0:
            return
        r.rebase(t)
        r.done0 = max(0.0, r.done0 - r.rate * cost)
        r.finish = r.t0 + (r.job.iterations - r.done0) / r.rate
        r.k_done = self._boundary(r.finish)

    def _start(self, r: _Running) -> None:
        """A job whose process (re)starts now makes no progress for `start_cost_s`: its
        progress line starts that many seconds of work below where it stands."""
        cost = self.config.start_cost_s
        if cost <= 0 or r.rate <= 0:
            return
        r.done0 -= r.rate * cost
        r.finish = r.t0 + (r.job.iterations - r.done0) / r.rate
        r.k_done = self._boundary(r.finish)


def _rate(job: Job, alloc: Allocation, cluster: Cluster, partner: Job | None, pairs: PairTable | None) -> float:
    """Iterations per second; a CPU-only job's iterations are seconds at what it asked for
    (the CPU array gives it exactly that or nothing: simulator/cpu_jobs.py). A job sharing
    its GPUs runs at `packed_speed` until the next boundary, even if its partner completes
    before it (the partner's share of the GPUs stays idle until then, like its resources);
    an elastic job's scales linearly with the GPUs it holds (`elastic.scaling.scale`)."""
    if job.kind == JobKind.CPU_ONLY:
        return 1.0
    return iterations_per_s(job, packed_speed(job, alloc, cluster, partner, pairs)) * scale(job, alloc.total.gpus)


def _usage(job: Job, alloc: Allocation, cluster: Cluster) -> Usage:
    """What `alloc` holds, and how much of its CPU and memory the job can consume.

    A job never uses more than its saturating demand: past `best_case()` (no floor: the
    smallest cell within 1% of saturation) extra CPUs and memory buy it nothing. GPUs are
    always fully used by the job holding them, so they have no separate "used" column.
    """
    t = alloc.total
    g, c, m = t.gpus, t.cpus, t.mem_gb
    if job.kind == JobKind.CPU_ONLY:  # it uses all it asked for
        return g, c, m, c, m
    landed = cluster.gpu_type_of(alloc.placements[0].server_id) if alloc.placements else ""
    c_sat, m_sat = job.profile.on(landed).best_case()  # a faster GPU type may want more
    held_g = 0.0 if alloc.packed_with is not None else g  # a packed job's GPUs are its host's
    return held_g, c, m, min(c, c_sat * g), min(m, m_sat * g)
