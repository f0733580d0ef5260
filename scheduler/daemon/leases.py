"""Leases: what a job process learns when it registers and renews, and when it is lost.

A renewal is the job's heartbeat and its only channel for "stop": a job whose lease a round
did not renew is told STOP with one `stop_at_step` for every rank (the largest step any rank
reported plus enough steps to cover a renewal interval), so all ranks leave the same
collective together. Renewals touch memory only; the stop step is committed before the
first rank hears it, so a restarted daemon tells the remaining ranks the same step.
"""

from __future__ import annotations

import enum
import math
import sys
from dataclasses import replace
from typing import Any, Mapping

from synergy.common.values import value
from synergy.scheduler.daemon import periodic
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.errors import FailedPrecondition, InvalidArgument, PermissionDenied
from synergy.scheduler.daemon.jobs import JobBook
from synergy.scheduler.daemon.live import JobLive, ObservedTask, RankLease
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.profiling import with_point
from synergy.scheduler.placement.profiling import SUB_CORE_POINTS
from synergy.scheduler.daemon.records import JobRecord, JobState, placed_on
from synergy.scheduler.tasks import TaskKey

_FLOAT_MAX = sys.float_info.max


class LeaseAction(str, enum.Enum):
    CONTINUE = "continue"
    STOP = "stop"
    TERMINATE = "terminate"


@value
class Renewal:
    """The answer to one renewal: a value object (synergy.common.values), a thousand a second."""

    action: LeaseAction
    job: JobRecord
    expires_at: float = 0.0
    stop_at_step: int = 0
    reason: str = ""
    #: The rank's task as its agent last reported it (None: not reported yet).
    in_force: ObservedTask | None = None
    #: A periodic checkpoint after this step (0 = none due; periodic.py).
    checkpoint_at_step: int = 0


#: Value objects (synergy.common.values): never assigned after they are built.
VALUE_TYPES: tuple[type, ...] = (Renewal,)


class LockBusy(Exception):
    """A renewal that needs the state lock found it taken (`LeaseBook.renew(wait=False)`)."""


class LeaseBook:
    def __init__(self, ctx: DaemonContext, jobs: JobBook) -> None:
        self.ctx = ctx
        self.jobs = jobs
        #: When `expire` last scanned, and the earliest time a job it saw can lapse.
        self._scanned_at = self._next_scan = 0.0
        #: The renewal counter's child per action (looking a label up takes a lock each time).
        self._counted = {a: ctx.metrics.lease_renewals.labels(a.value) for a in LeaseAction}

    def _own(self, caller: int, job_id: int) -> JobRecord:
        if caller != job_id:
            raise PermissionDenied(f"job_id: this token belongs to job {caller}, not job {job_id}")
        return self.jobs.get(job_id)

    def _current(self, job: JobRecord, attempt: int, rank: int) -> None:
        if attempt < 1:
            raise InvalidArgument("attempt", f"must be at least 1, got {attempt}")
        if not job.placed or attempt != job.attempt:
            raise FailedPrecondition(
                f"attempt: {attempt} is not the job's running attempt (job {job.id} is {job.state.value}, "
                f"attempt {job.attempt})"
            )
        if rank >= len(job.placements):
            raise InvalidArgument("rank", f"{rank} is out of range: the attempt has {len(job.placements)} node ranks")

    def in_force(self, job: JobRecord, rank: int) -> ObservedTask | None:
        """The rank's task as the node it is placed on last reported it (live only)."""
        if not 0 <= rank < len(job.placements):
            return None
        node_id = job.placements[rank].server_id
        node = self.ctx.live.nodes.get(node_id)
        task = node.tasks.get(TaskKey(job.id, job.attempt, rank)) if node is not None else None
        return task if task is not None and placed_on(job, rank, node_id) else None

    def register_process(
        self, caller: int, job_id: int, attempt: int, rank: int, world_size: int
    ) -> tuple[JobRecord, float]:
        ctx = self.ctx
        with ctx.lock:
            job = self._own(caller, job_id)
            self._current(job, attempt, rank)
            if world_size and world_size != len(job.placements):
                raise InvalidArgument(
                    "world_size", f"{world_size} does not match the attempt's {len(job.placements)} node ranks"
                )
            now = ctx.clock.now()
            live = ctx.live.job(job.id, job.attempt, now)
            live.ranks[rank] = RankLease(last_renewal=now, step=job.checkpoint_step)
            event(ctx.log, "job.process_registered", job=job.id, attempt=attempt, rank=rank)
            return job, now + ctx.lease_grace(now)

    def renew(
        self,
        caller: int,
        job_id: int,
        attempt: int,
        rank: int,
        step: int,
        samples_per_s: float,
        steps_per_s: float,
        profile_cpus: float = 0,
        cache: Mapping[str, int] | None = None,
        wait: bool = True,
    ) -> Renewal:
        """`profile_cpus`: the next point of a profiling lease (0 = none): whole CPUs, or one of
        `SUB_CORE_POINTS` on a `sub_core` lease; `cache`: the job's MinIO cache counters
        (CacheStats in common.proto), kept live for describe. `wait=False`: raise LockBusy
        rather than wait when the answer needs the state lock and another thread holds it (the
        gRPC loop must not block: the caller retries off the loop with `wait=True`)."""
        if not (0 <= samples_per_s <= _FLOAT_MAX and 0 <= steps_per_s <= _FLOAT_MAX):  # False for NaN too
            for name, v in (("samples_per_s", samples_per_s), ("steps_per_s", steps_per_s)):
                if not math.isfinite(v) or v < 0:
                    raise InvalidArgument(name, f"must be a finite number >= 0, got {v}")
        ctx = self.ctx
        # The common answer (continue, or stop at an already agreed step) only reads a record
        # and writes this rank's live entry, both atomic dict operations: no lock, so a
        # thousand renewals a second do not queue behind heartbeats and rounds.
        out = self._renew(self._own(caller, job_id), attempt, rank, step, samples_per_s, steps_per_s, profile_cpus,
                          False)
        if out is None:  # the stop step (or a profiling point) must be committed first
            if not ctx.lock.acquire(blocking=wait):
                raise LockBusy()
            try:
                job = self._own(caller, job_id)
                out = self._renew(job, attempt, rank, step, samples_per_s, steps_per_s, profile_cpus, True)
            finally:
                ctx.lock.release()
        assert out is not None
        if cache is not None and out.action != LeaseAction.TERMINATE:
            ctx.live.cache[job_id] = dict(cache)
        self._counted[out.action].inc()
        return out

    def _renew(
        self,
        job: JobRecord,
        attempt: int,
        rank: int,
        step: int,
        samples: float,
        rate: float,
        profile_cpus: float,
        locked: bool,
    ) -> Renewal | None:
        """The renewal's answer; None when it needs a state change and `locked` is False."""
        ctx = self.ctx
        if job.state.terminal:
            return Renewal(LeaseAction.TERMINATE, job, reason=f"job {job.state.value}: {job.reason}")
        if attempt < 1:
            raise InvalidArgument("attempt", f"must be at least 1, got {attempt}")
        if not job.placed or attempt != job.attempt:
            return Renewal(
                LeaseAction.TERMINATE,
                job,
                reason=f"attempt {attempt} is stale (job is {job.state.value} at attempt {job.attempt})",
            )
        if rank >= len(job.placements):
            raise InvalidArgument("rank", f"{rank} is out of range: the attempt has {len(job.placements)} node ranks")
        if profile_cpus and not job.stopping:
            if not job.profiling_lease:
                raise FailedPrecondition(f"profile_cpus: job {job.id} does not hold a profiling lease")
            top = int(job.profile_max_cpus)
            if profile_cpus < 1:
                if not job.profile_sub_core or profile_cpus not in SUB_CORE_POINTS:
                    allowed = " or ".join(map(str, SUB_CORE_POINTS)) if job.profile_sub_core else "none"
                    raise InvalidArgument("profile_sub_cpus", f"points below one CPU on this lease: {allowed}; "
                                          f"got {profile_cpus:g}")
            elif top < 1:
                raise InvalidArgument("profile_cpus", f"this profiling lease holds {job.profile_max_cpus:g} CPU: "
                                      f"ask for points below one CPU (profile_sub_cpus), got {profile_cpus:g}")
            elif profile_cpus != int(profile_cpus) or not 1 <= profile_cpus <= top:
                raise InvalidArgument("profile_cpus", f"must be from 1 to {top} (the profiling lease's CPUs), "
                                      f"got {profile_cpus:g}")
            if abs(job.placements[0].cpus - profile_cpus) > 1e-9:
                if not locked:
                    return None
                new = with_point(job, profile_cpus)
                ctx.save_jobs([(job, new)])
                event(ctx.log, "job.profile_point", job=job.id, attempt=attempt, cpus=profile_cpus)
                job = new
        now = ctx.clock.now()
        live = ctx.live.job(job.id, job.attempt, now)
        live.ranks[rank] = RankLease(now, step, samples, rate)
        expires = now + ctx.lease_grace(now)
        if not job.stopping:
            at = periodic.due(job, live, now, ctx.config)
            if at is None:
                if not locked:
                    return None
                at = periodic.advance(job, live, now, ctx.config, ctx.renew_interval_s)
            return Renewal(LeaseAction.CONTINUE, job, expires, in_force=self.in_force(job, rank), checkpoint_at_step=at)
        if not job.stop_at_step:
            if not locked:
                return None
            new = replace(job, stop_at_step=live.step + periodic.margin(live, ctx.renew_interval_s))
            ctx.save_jobs([(job, new)])
            event(ctx.log, "job.stop_agreed", job=job.id, attempt=attempt, stop_at_step=new.stop_at_step)
            job = new
        return Renewal(LeaseAction.STOP, job, expires, job.stop_at_step, job.stop_reason, self.in_force(job, rank))

    def report_profile(self, caller: int, job_id: int, profile: Mapping[str, Any]) -> str:
        """Store a reported profile (a later one replaces it: a job refines its profile online
        at each new allocation, and the next round uses it). Under a profiling lease it is "profiled" and ends the
        profiling without a restart: the job runs on, RUNNING where it was profiled, and the
        next round sets its allocation like any running job's (a RESIZE in place, or a move
        that buys something). A restart (checkpoint, exit 75, a new process) cost each job
        seconds of start-up on the physical run (issue 14). A lease already being stopped
        (its node drains, a cancel) ends as before: the job queues with its profile."""
        ctx = self.ctx
        with ctx.lock:
            job = self._own(caller, job_id)
            if job.state.terminal:
                raise FailedPrecondition(f"job_id: job {job_id} already ended ({job.state.value})")
            # A profile measured under the lease and refined afterwards (profiler/refine.py:
            # the job measured a new allocation in force) stays "profiled".
            # Under Slurm, measured at the CPUs a Slurm job held (profiles.measures_in_force): profiled too.
            profiled = job.state == JobState.PROFILING or job.profiled or ctx.profiles.measures_in_force(job)
            new = replace(job, reported_profile=dict(profile), profiled=profiled)
            new = replace(new, profile_source=ctx.profiles.source(new))
            if new.profiling_lease and not new.stopping:
                new = self.jobs.run_on(new)
            elif new.profiling_lease:
                new = self.jobs.request_stop(new, "profiled: the profiling lease ends")
            elif new.state == JobState.PROFILING:  # not placed (requeued into profiling meanwhile): queue it now
                new = new.to(JobState.QUEUED, "profile: profiled; waiting for the next round", ctx.clock.now())
            ctx.save_jobs([(job, new)])
            ctx.profiles.forget(job.id)
            stored = ctx.profiles.learn(new)  # later jobs of the same workload reuse it
            event(ctx.log, "job.profile_reported", job=job.id, source=new.profile_source, stored=stored)
            return new.profile_source

    def report_checkpoint(self, caller: int, job_id: int, attempt: int, step: int, path: str, error: str = "") -> int:
        """A written checkpoint (`path`), or a failed write (`error`: kept for describe until
        the next good one; the job goes on, and resumes from the last good one)."""
        ctx = self.ctx
        with ctx.lock:
            job = self._own(caller, job_id)
            if attempt < 1 or attempt > job.attempt:
                raise InvalidArgument(
                    "attempt", f"{attempt} was never launched (job {job.id} is at attempt {job.attempt})"
                )
            if attempt < job.attempt:
                raise FailedPrecondition(f"attempt: {attempt} is stale; job {job.id} is at attempt {job.attempt}")
            live = ctx.live.jobs.get(job.id)
            limit = live.step_limit(ctx.clock.now(), max(job.stop_at_step, job.steps_done)) if (
                live is not None and live.attempt == attempt) else None
            if limit is not None and step > limit:
                raise InvalidArgument("step", f"{step} is past what job {job.id} has reported (step {live.step} at "
                                      f"{live.steps_per_s:g} steps/s: at most {limit} by now)")
            if error:
                if error != job.checkpoint_error:
                    new = replace(job, checkpoint_error=error)
                    ctx.save_jobs([(job, new)])
                    job = new
                event(ctx.log, "job.checkpoint_failed", job=job.id, attempt=attempt, step=step, error=error)
            elif step >= job.checkpoint_step:
                new = replace(job, checkpoint_path=path, checkpoint_step=step, steps_done=max(job.steps_done, step),
                              checkpoint_at=ctx.clock.now(), checkpoint_error="")
                ctx.save_jobs([(job, new)])
                event(ctx.log, "job.checkpointed", job=job.id, attempt=attempt, step=step)
                job = new
            return job.checkpoint_step

    def report_completion(
        self, caller: int, job_id: int, attempt: int, succeeded: bool, step: int, message: str
    ) -> JobState:
        ctx = self.ctx
        with ctx.lock:
            job = self._own(caller, job_id)
            if job.state.terminal:
                return job.state
            if not job.placed or attempt != job.attempt:
                raise FailedPrecondition(
                    f"attempt: {attempt} is not the job's running attempt (job {job.id} is {job.state.value}, "
                    f"attempt {job.attempt})"
                )
            now = ctx.clock.now()
            target = JobState.SUCCEEDED if succeeded else JobState.FAILED
            detail = f": {message}" if message else ""
            reason = ("training finished" if succeeded else "the job reported a failure") + f" at step {step}{detail}"
            new = self.jobs.with_progress(job, now)
            new = replace(new, steps_done=max(new.steps_done, step)).to(target, reason, now)
            ctx.save_jobs([(job, new)])
            event(ctx.log, "job.completed", job=job.id, state=target.value, step=step)
            return new.state

    def expire(self) -> int:
        """Requeue RUNNING jobs whose ranks stopped renewing (or never started); returns how many.

        The scan of every placed job runs without the state lock, reading records and live
        entries as renewals do; only the jobs it finds lapsed are checked again, and requeued,
        under the lock. At 10,000 jobs the scan costs 12-20 ms, and held under the lock each
        second it lay under 55% of the slowest 1% of calls in daemon_load.py (issue 17). A scan
        also notes the earliest time any job it saw can lapse, and the next one waits for it:
        renewals only move deadlines later, and a job placed or told to stop after the scan
        cannot lapse before the shortest of the timeouts has passed."""
        ctx, cfg = self.ctx, self.ctx.config
        now = ctx.clock.now()
        if self._scanned_at <= now < self._next_scan:
            return 0
        with ctx.lock:
            jobs = ctx.store.active_jobs()  # a copy of the record list: cheap, and not safe unlocked
        now = ctx.clock.now()
        grace = ctx.lease_grace(now)
        next_scan = now + min(grace, cfg.launch_timeout, cfg.stop_timeout + grace)
        suspects = []
        for job in jobs:
            if job.placed:
                at, why = self._lapse(job, ctx.live.jobs.get(job.id), now)
                if why:
                    suspects.append(job.id)
                elif at < next_scan:
                    next_scan = at
        self._scanned_at, self._next_scan = now, next_scan
        if not suspects:
            return 0
        with ctx.lock:
            now = ctx.clock.now()
            changes = []
            for job_id in suspects:
                job = ctx.store.job(job_id)
                if job is None or not job.placed:
                    continue
                _, why = self._lapse(job, ctx.live.job(job.id, job.attempt, now), now)
                if why:
                    changes.append((job, self.jobs.preempt(job, why)))
            if changes:
                ctx.save_jobs(changes)
            return len(changes)

    def _lapse(self, job: JobRecord, live: JobLive | None, now: float) -> tuple[float, str]:
        """(when the placed `job`'s lease lapses, why it has by `now`: "" = not yet). Without a
        live entry for its attempt the job is a suspect ("unseen"): the entry, from whose start
        the launch timeout counts, is made under the lock."""
        cfg = self.ctx.config
        if live is None or live.attempt != job.attempt:
            return -math.inf, "unseen"
        grace = self.ctx.lease_grace(now)
        if job.stopping:
            limit = cfg.stop_timeout + grace
            at = job.stop_requested_at + limit
            return at, f"{job.stop_reason}; did not exit within {limit:g} s of the stop request" if now > at else ""
        first = math.inf
        for rank in range(len(job.placements)):
            r = live.ranks.get(rank)
            if r is not None:
                at = r.last_renewal + grace
                if now > at:
                    return at, f"lost: rank {rank} has not renewed its lease for {now - r.last_renewal:.1f} s"
            # A CPU-only job is a plain command (no iterator, no lease): its agent's task
            # reports and node liveness are what track it.
            elif not job.spec.cpu_only:
                at = live.since + cfg.launch_timeout
                if now > at:
                    return at, f"lost: rank {rank} did not register within {cfg.launch_timeout:g} s of its launch"
            else:
                continue
            first = min(first, at)
        return first, ""
