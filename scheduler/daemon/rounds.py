"""The round loop: decide the next round before its boundary, apply it at the boundary.

`plan` snapshots the store under the lock, then runs the pure core
(`Scheduler.schedule(RoundInput)`) outside it, so RPCs keep flowing while OPT thinks.
`apply` turns the decision into lifecycle moves, all committed in one transaction:

* unchanged placement and allocation -> nothing to do, the lease simply keeps renewing;
* same nodes and GPUs, other CPU / memory -> resized in place (RESIZE to the agents);
* anything else for a running job -> a migration (counted on /metrics): asked to stop,
  relaunched with the new allocation as soon as its processes have exited (this is also
  how an elastic job rescales: the core gave it another GPU count, it checkpoints at an
  agreed step and relaunches);
* not chosen while running -> asked to stop (told at its next renewal); while queued ->
  keeps waiting, with the core's reason.

"Same" ignores the order of a split job's pieces, and the core relabels interchangeable
nodes to match the running plan (Tesserae, placement/migration.py), so a round that would
only rename nodes restarts nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from synergy.scheduler.core import Scheduler
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.errors import InvalidArgument
from synergy.scheduler.daemon.jobs import JobBook, fmt_placements, same_share
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.nodes import NodeBook
from synergy.scheduler.daemon.profiles import proportional_profile, starting_profile
from synergy.scheduler.daemon.profiling import held_by_profiling, waits_for_lease
from synergy.scheduler.daemon.records import JobRecord, JobState
from synergy.scheduler.model import Allocation, Cluster, Job, JobKind, Placement, Resources, RoundInput, Server
from synergy.scheduler.placement.migration import migrated
from synergy.scheduler.profiles.pairs import load_pairs
from synergy.scheduler.registry import UnknownNameError, build_scheduler

#: Training length assumed for a job that did not say (orders it last under SRTF / FTF).
DEFAULT_ITERATIONS = 10**9


@dataclass(frozen=True)
class Plan:
    round_index: int
    made_at: float
    decision_s: float
    considered: frozenset[int]
    allocations: dict[int, tuple[Placement, ...]]
    waiting: dict[int, str] = field(default_factory=dict)
    #: Packed allocations: job id -> the job whose GPUs it shares (Allocation.packed_with).
    packed: dict[int, int] = field(default_factory=dict)
    #: Running jobs this round moves -> what the move buys (RoundOutput.moves).
    moves: dict[int, str] = field(default_factory=dict)
    #: Jobs waiting for a profiling lease whose stand-ins this round placed: the policy ranked
    #: them above the queued jobs it left waiting, so their leases go first (profiling.py).
    granted: frozenset[int] = frozenset()


@dataclass
class RoundLoop:
    ctx: DaemonContext
    jobs: JobBook
    nodes: NodeBook
    next_boundary: float = 0.0
    round_index: int = 0
    last_decision_s: float = 0.0
    pending: Plan | None = None
    #: The granted stand-ins of the last round applied (`Plan.granted`).
    applied_granted: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        self.policy = self.ctx.store.setting("policy") or self.ctx.config.policy
        self.mechanism = self.ctx.store.setting("mechanism") or self.ctx.config.mechanism
        # Read once: load_config has checked the file, and a round must not depend on a file
        # edited under a running daemon.
        self.pairs = load_pairs(self.ctx.config.pairs) if self.ctx.config.pairs is not None else None
        self.scheduler: Scheduler = self._build(self.policy, self.mechanism)
        if not self.next_boundary:
            self.next_boundary = self.ctx.clock.now() + self.ctx.config.round_s

    def _build(self, policy: str, mechanism: str) -> Scheduler:
        """The named plug-ins with the daemon's fixed settings (scorer, relabelling, packing,
        CPU array)."""
        cfg = self.ctx.config
        scheduler = build_scheduler(policy, mechanism, cfg.scorer, cfg.migration_matching, self.pairs)
        return replace(scheduler, cpu_array=cfg.cpu_array)

    # -- runtime settings -----------------------------------------------------------------------
    def set_policy(self, policy: str, mechanism: str) -> tuple[str, str]:
        policy, mechanism = policy or self.policy, mechanism or self.mechanism
        try:
            scheduler = self._build(policy, mechanism)
        except UnknownNameError as exc:
            raise InvalidArgument("mechanism" if "mechanism" in str(exc) else "policy", str(exc)) from None
        with self.ctx.lock:
            self.ctx.store.save_setting("policy", policy)
            self.ctx.store.save_setting("mechanism", mechanism)
            self.scheduler, self.policy, self.mechanism = scheduler, policy, mechanism
        event(self.ctx.log, "policy.changed", policy=policy, mechanism=mechanism)
        return policy, mechanism

    # -- the loop -------------------------------------------------------------------------------
    def tick(self) -> None:
        """Called often (by RoundEvent): plans ahead of the boundary, applies at it."""
        now = self.ctx.clock.now()
        if self.pending is None and now >= self.next_boundary - self.ctx.config.plan_lead:
            self.pending = self.plan()
        if now >= self.next_boundary:
            plan, self.pending = self.pending, None
            self.apply(plan or self.plan())
            round_s = self.ctx.config.round_s
            while self.next_boundary <= now:
                self.next_boundary += round_s

    def snapshot(self) -> tuple[Cluster, list[JobRecord]]:
        """Every node as the core sees it, and the active jobs, as of now (caller holds the lock).

        Nodes are not filtered here: admin state and liveness travel as data on each
        `Server`, and the core's filters (placement/filters.py) decide what they mean.
        Shares held by profiling leases (profiling.py) are taken out of the nodes: the core
        does not see profiling jobs, and must not give their CPUs away.
        """
        active = self.ctx.store.active_jobs()
        jobs = [j for j in active if j.state in (JobState.QUEUED, JobState.RUNNING)]
        return self.cluster(held_by_profiling(active)), jobs

    def cluster(self, held: Mapping[str, Resources] | None = None) -> Cluster:
        """Every registered node as the core sees it (caller holds the lock), less the shares
        in `held` (node id -> what profiling leases hold there): the rounds' input, and, with
        nothing held, what DescribeJob / ListJobs compute a job's proportional share on."""
        whole = tuple(
            Server(node.id, node.allocatable, pool=node.pool, admin=self.nodes.admin_state(node),
                   last_heartbeat_s=self.nodes.last_heard(node.id), gpu_type=node.gpu_type)
            for node in self.ctx.store.nodes()
        )
        if not held:
            return Cluster(whole)
        left = tuple(replace(s, capacity=s.capacity - held.get(s.id, Resources())) for s in whole)
        return Cluster(left, share_basis=whole)  # the share stays the cluster's, not what is left

    def plan(self) -> Plan:
        ctx = self.ctx
        with ctx.lock:
            cluster, records = self.snapshot()
            scheduler, index = self.scheduler, self.round_index + 1
            now = ctx.clock.now()
            # A job whose GPU types no schedulable node has is the core's to explain (it
            # waits, or is not kept, with the reason), as it is in the simulator.
            # A job whose process is still starting (interpreter, imports, workers: up to its
            # training loop) is seen at its proportional share: its profile describes its
            # training loop, not its start-up, and the agent weights a starting task's CPU by
            # its allocation (agent/startup.py). Seen at a light job's quarter core, its
            # start-up took 10-12 s beside the heavy jobs against 5 s at its share (issue 14's
            # physical run), and the last jobs of the queue set the makespan.
            starting = {j.id for j in records if self._starting(j)}
            core_jobs = [self._core_job(j, cluster, starting=j.id in starting) for j in records]
            # The same jobs as they are, should the share of a starting one move others.
            as_they_are = [self._core_job(j, cluster) if j.id in starting else cj
                           for j, cj in zip(records, core_jobs)] if starting else core_jobs
            # Jobs waiting for a profiling lease (profiling.py) are seen at their proportional
            # share, ranked by the policy among the queued jobs but behind every running one
            # (`RoundInput.last`: they preempt nobody), so that the round leaves them that room
            # (their allocations go nowhere: `ProfilingBook` places the leases in what the
            # round leaves free, the granted ones first). Unseen, the round gave everything
            # away, a lone job's best case and leftovers filled a node with free GPUs, and
            # arrivals waited for it to end (issue 14's dynamic trace).
            stand_ins = [self._core_job(j, cluster, at_share=True)
                         for j in self.ctx.store.active_jobs() if waits_for_lease(j)]
            core_jobs += stand_ins
            # Jobs asked to stop are on their way out: they hold no place to keep.
            previous = {
                j.id: Allocation(j.id, j.placements, packed_with=j.packed_with or None)
                for j in records
                if j.state == JobState.RUNNING and j.placements and not j.stopping
            }
        started = time.perf_counter()
        inp = RoundInput(now, cluster, core_jobs, previous, ctx.config.round_s, ctx.heartbeat_window(now),
                         last=frozenset(j.id for j in stand_ins))
        out = ctx.decider.decide(scheduler, inp)
        if out.moves and starting:
            # A starting job's share is for its start-up, a few seconds: it must not cost a
            # running job a restart. `make demo` under TUNE swapped two light jobs between
            # nodes (two restarts of ~10 s) to keep a starting one's half core beside a heavy
            # job given three quarters. Seen as they are, the jobs may stay where they run.
            plain = ctx.decider.decide(scheduler, replace(inp, jobs=as_they_are + stand_ins))
            if len(plain.moves) < len(out.moves):
                event(ctx.log, "round.moves_avoided", round=index, starting=sorted(starting),
                      moves=len(out.moves) - len(plain.moves),
                      message="jobs still starting seen at their own allocation, not their share, "
                              "so that running jobs need not move for them")
                out = plain
        decision_s = time.perf_counter() - started
        ctx.metrics.decision_seconds.observe(decision_s)
        self.last_decision_s = decision_s
        considered = frozenset(j.id for j in records)
        allocations = {job_id: a for job_id, a in out.allocations.items() if job_id in considered}
        placements = {job_id: tuple(alloc.placements) for job_id, alloc in allocations.items()}
        packed = {job_id: a.packed_with for job_id, a in allocations.items() if a.packed_with is not None}
        waiting = {job_id: why for job_id, why in out.waiting.items() if job_id in considered}
        granted = frozenset(j.id for j in stand_ins if j.id in out.allocations)
        return Plan(index, now, decision_s, considered, placements, waiting, packed, out.moves, granted)

    @property
    def granted(self) -> frozenset[int]:
        """Jobs waiting for a profiling lease that the latest round decided placed (the pending
        plan's once one is decided, else the last applied one's): their leases go first."""
        return self.pending.granted if self.pending is not None else self.applied_granted

    def apply(self, plan: Plan) -> None:
        ctx = self.ctx
        with ctx.lock:
            changes = {}
            moved = 0
            for job in ctx.store.active_jobs():
                new = self._apply_one(job, plan)
                if new is not None and new is not job:
                    changes[job.id] = (job, new)
                    moved += new.migrations - job.migrations
            self._stop_partners_left(plan, changes)
            changes = list(changes.values())
            if changes:
                ctx.save_jobs(changes)
            self.round_index = plan.round_index
            self.applied_granted = plan.granted
            ctx.metrics.rounds.inc()
            ctx.metrics.migrations.inc(moved)
            ctx.metrics.round_migrations.set(moved)
            event(
                ctx.log,
                "round.applied",
                round=plan.round_index,
                decision_ms=round(plan.decision_s * 1000, 3),
                placed=len(plan.allocations),
                waiting=len(plan.waiting),
                changed=len(changes),
                migrations=moved,
                policy=self.policy,
                mechanism=self.mechanism,
            )

    def _stop_partners_left(self, plan: Plan, changes: dict[int, tuple[JobRecord, JobRecord]]) -> None:
        """Packed jobs whose host stops or moves this round are asked to stop in the same round
        (the core keeps no packed job whose host left, but a stop request is not an exit)."""
        now = {j.id: j for j in self.ctx.store.active_jobs()}
        now.update((job_id, new) for job_id, (_, new) in changes.items())
        for job in list(now.values()):
            why = self.jobs.partner_left(job, now.get(job.packed_with))
            if why:
                old = changes[job.id][0] if job.id in changes else job
                changes[job.id] = (old, self.jobs.request_stop(job, f"round {plan.round_index}: {why}", ()))

    def _apply_one(self, job: JobRecord, plan: Plan) -> JobRecord | None:
        new_place = plan.allocations.get(job.id)
        packed = plan.packed.get(job.id, 0)
        r = plan.round_index
        if job.id not in plan.considered:
            if job.state == JobState.QUEUED:
                return _waiting(job, f"submitted after round {r} was decided; considered next round")
            return None
        if job.state == JobState.QUEUED:
            if new_place is None:
                reason = plan.waiting.get(job.id, "not chosen this round")
                if reason != job.waiting_reason:
                    event(self.ctx.log, "job.waiting", job=job.id, round=r, reason=reason)
                return _waiting(job, reason)
            gone = sorted({p.server_id for p in new_place if not self.jobs.placeable(p.server_id)})
            if gone:  # lost or draining since the plan's snapshot: placing there would strand the job
                return _waiting(job, f"node {', '.join(gone)} became unavailable after round {r} was decided; "
                                     "considered next round")
            where = f" (sharing the GPUs of job {packed})" if packed else ""
            return self.jobs.launch(job, new_place, r, f"round {r}: placed on {fmt_placements(new_place)}{where}",
                                    packed_with=packed)
        if job.state != JobState.RUNNING:
            return None
        if job.stopping:
            return _with_next(job, new_place or (), packed if new_place else 0, r)
        if new_place is None:
            why = plan.waiting.get(job.id, "not chosen this round")
            return self.jobs.request_stop(job, f"round {r}: lease not renewed ({why})")
        if migrated(job.placements, new_place) or packed != job.packed_with:  # other GPUs: a move
            moving = replace(job, migrations=job.migrations + 1, next_round_index=r)
            where = f" (sharing the GPUs of job {packed})" if packed else ""
            why = f"; {plan.moves[job.id]}" if job.id in plan.moves else ""
            return self.jobs.request_stop(moving, f"round {r}: moving to {fmt_placements(new_place)}{where}{why}",
                                          new_place, packed)
        new_place = _in_order_of(job.placements, new_place)
        if len(new_place) == len(job.placements) and all(map(same_share, new_place, job.placements)):
            return None
        if not self.ctx.config.resizes_in_place:  # Slurm: a new Slurm job with the new share
            return self.jobs.request_stop(replace(job, next_round_index=r),
                                          f"round {r}: resized to {fmt_placements(new_place)} (a new Slurm job)",
                                          new_place, packed)
        event(self.ctx.log, "job.resized", job=job.id, round=r, placements=fmt_placements(new_place))
        return _resized(job, new_place, r)

    def core_jobs(self, records: Sequence[JobRecord]) -> dict[int, Job]:
        """The jobs as the core sees them now, by id (caller holds the lock): what a reclaim
        reads the elastic ranges from (daemon/loaning.py)."""
        cluster = self.cluster()
        return {j.id: self._core_job(j, cluster) for j in records}

    def _starting(self, job: JobRecord) -> bool:
        """A running job whose processes have not all reached their training loop (live.py).
        Never under a backend that cannot resize a running task (Slurm): there the share while
        it starts, then its own allocation, would be two stops and two new Slurm jobs."""
        return (self.ctx.config.resizes_in_place and job.state == JobState.RUNNING and bool(job.placements)
                and not job.stopping
                and self.ctx.live.starting(job.id, job.attempt, [p.server_id for p in job.placements]))

    def _core_job(self, job: JobRecord, cluster: Cluster, at_share: bool = False, starting: bool = False) -> Job:
        """The job as the core sees it; `at_share`: with its proportional profile, whatever
        its own (a stand-in for a profiling lease); `starting`: at its share, at its own pace
        there (profiles.starting_profile)."""
        live = self.jobs.progress(job)
        profile = proportional_profile(job, cluster) if at_share else self.ctx.profiles.profile(job, cluster)
        if starting:
            profile = starting_profile(job, profile, cluster)
        steps, _, attained = live if live is not None else (job.steps_done, 0.0, job.attained_gpu_s)
        return Job(
            id=job.id,
            model=job.spec.model or job.name,
            gpus=job.spec.gpus,
            arrival_s=job.submitted_at,
            iterations=float(job.spec.iterations or DEFAULT_ITERATIONS),
            profile=profile,
            done_iterations=float(steps),
            attained_gpu_s=attained,
            kind=_kind(job),
            user=job.spec.user,  # DRF between users in the CPU array ("" = the job is its own user)
            min_gpus=job.spec.min_gpus if job.spec.elastic else None,
            max_gpus=job.spec.max_gpus if job.spec.elastic else None,
            # A CPU-only job's request; a training job's hints stay with its profile.
            cpus=job.spec.cpus_hint if job.spec.cpu_only else 0.0,
            mem_gb=job.spec.mem_gb_hint if job.spec.cpu_only else 0.0,
            gpu_types=frozenset(job.spec.gpu_types),
            loanable=job.spec.loanable,
            no_share=job.spec.no_share,
        )


def _in_order_of(running: Sequence[Placement], new: Sequence[Placement]) -> tuple[Placement, ...]:
    """`new` (the same nodes and GPUs as `running`) in `running`'s node order: ranks are
    numbered along the placements, and a rank stays on its node."""
    position = {p.server_id: k for k, p in enumerate(running)}
    return tuple(sorted(new, key=lambda p: position.get(p.server_id, len(position))))


def _kind(job: JobRecord) -> JobKind:
    if job.spec.cpu_only:
        return JobKind.CPU_ONLY
    return JobKind.ELASTIC if job.spec.elastic else JobKind.TRAINING



def _waiting(job: JobRecord, reason: str) -> JobRecord:
    return job if job.waiting_reason == reason else replace(job, waiting_reason=reason)


def _with_next(job: JobRecord, placements: tuple[Placement, ...], packed_with: int, round_index: int) -> JobRecord:
    if job.next_placements == placements and job.next_packed_with == packed_with:
        return job
    return replace(job, next_placements=placements, next_packed_with=packed_with, next_round_index=round_index)


def _resized(job: JobRecord, placements: tuple[Placement, ...], round_index: int) -> JobRecord:
    return replace(job, placements=placements, round_index=round_index)
