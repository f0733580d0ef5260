"""Jobs: admission (submit, cancel, look-up) and the lifecycle moves every other part uses.

The helpers that move a job (`launch`, `request_stop`, `preempt`, `task_exited`, ...) are
pure with respect to the store: they return the changed record and the caller commits all
the changes of one decision in one transaction. Callers hold `ctx.lock`.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from itertools import islice
from typing import Iterable, Sequence

from synergy.scheduler.daemon import validation
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.errors import AlreadyExists, FailedPrecondition, NotFound
from synergy.scheduler.daemon.live import JobLive, ObservedTask
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.records import AdminState, JobRecord, JobSpec, JobState, Transition, placed_on
from synergy.scheduler.model import EPS, Placement
from synergy.scheduler.tasks import IMPOSSIBLE_PLACEMENT, LAUNCH_FAILED

#: Exit code a job uses for "I checkpointed; restart me later" (EX_TEMPFAIL).
EXIT_RESTART = 75


def fmt_placements(placements: Sequence[Placement]) -> str:
    return ", ".join(f"{p.server_id}: {p.gpus} GPU, {p.cpus:g} CPU, {p.mem_gb:g} GB" for p in placements)


def same_share(a: Placement, b: Placement) -> bool:
    """Same node, same GPUs, and CPU / memory equal up to float noise."""
    return (
        a.server_id == b.server_id
        and a.gpus == b.gpus
        and abs(a.cpus - b.cpus) < EPS
        and abs(a.mem_gb - b.mem_gb) < EPS
    )


def _gpus_per_node(job: JobRecord) -> list[tuple[str, int]]:
    return sorted((p.server_id, p.gpus) for p in job.placements)


class JobBook:
    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx

    # -- look-ups -------------------------------------------------------------------------------
    def get(self, job_id: int) -> JobRecord:
        job = self.ctx.store.job(job_id)
        if job is None:
            raise NotFound(f"job {job_id} does not exist")
        return job

    def find(self, ref: int | str, user: str | None = None) -> JobRecord:
        """A job by id (17, or "17": ASCII digits only) or name (the most recent job of that
        name; `user`: of that user's when they have one, since names are reused once ended)."""
        if isinstance(ref, str):
            ref = validation.job_ref(ref)
        with self.ctx.lock:
            if isinstance(ref, int):
                return self.get(ref)
            named = self.ctx.store.jobs_named(ref)
            if not named:
                raise NotFound(f"no job named {ref!r}")
            own = [j for j in named if j.spec.user == user]
            return (own or named)[-1]

    def list(
        self, states: Iterable[JobState] = (), limit: int = 0, user: str | None = None, after: int = 0, count: int = 0
    ) -> list[JobRecord]:
        """Jobs in `states` (all when empty), of `user` only unless None, by id: of the `limit`
        most recent (0: of all), those with an id above `after`, the first `count` (0: all).

        A page of ListJobs reads as far as it needs: the store keeps older ended jobs on
        disk (store/sqlite.py), and a listing that walked all of them for each page of 100
        would read a long history once per page."""
        wanted = frozenset(states)

        def mine(j: JobRecord) -> bool:
            return user is None or j.spec.user == user

        with self.ctx.lock:
            store = self.ctx.store
            if limit:
                recent = list(islice(filter(mine, store.scan_jobs(descending=True, states=wanted)), limit))
                found = [j for j in reversed(recent) if j.id > after]
                return found[:count] if count else found
            found = filter(mine, store.scan_jobs(after=after, states=wanted))
            return list(islice(found, count) if count else found)

    def progress(self, job: JobRecord) -> tuple[int, float, float] | None:
        """(steps done, samples/s, GPU-seconds) with what renewals reported since the last save;
        None when there is nothing live to add."""
        live = self.ctx.live.jobs.get(job.id)
        if live is None:
            return None
        return _progress(job, live, live.accrued_to, self.ctx.clock.now())

    def view(self, job: JobRecord) -> JobRecord:
        """`job` with the live progress (steps, throughput, GPU-seconds) folded in, unsaved."""
        now = self.progress(job)
        if now is None:
            return job
        return job.with_progress(*now)

    def with_progress(self, job: JobRecord, now: float | None = None) -> JobRecord:
        """Like `view`, and marks the GPU-seconds as counted (call only before saving). `now`:
        the time of the transition it goes with, so GPU-seconds end where its history does."""
        live = self.ctx.live.jobs.get(job.id)
        if live is None:
            return job
        now = self.ctx.clock.now() if now is None else now
        p = _progress(job, live, live.accrued_to, now)
        if p is None:
            return job
        live.accrued_to = max(live.accrued_to, now)
        return job.with_progress(*p)

    def flush_progress(self, job_ids: Iterable[int], batch: int = 100) -> None:
        """Persist what renewals reported (steps, throughput, GPU-seconds) for these jobs.

        The new records are worked out without the state lock; the lock is then taken for
        `batch` jobs at a time, only to check that each record and its live entry are still
        the ones read (a job changed meanwhile folded its progress in itself and is left to
        the next flush) and to save them. Worked out under the lock, a tenth of 10,000 jobs
        held it for 50 ms (issue 17)."""
        ctx = self.ctx
        now = ctx.clock.now()
        ready: list[tuple[JobRecord, JobRecord, JobLive, float]] = []
        for job_id in job_ids:
            job, live = ctx.store.job(job_id), ctx.live.jobs.get(job_id)
            if job is None or live is None:
                continue
            accrued = live.accrued_to
            p = _progress(job, live, accrued, now)
            if p is not None and p != (job.steps_done, job.samples_per_s, job.attained_gpu_s):
                ready.append((job, job.with_progress(*p), live, accrued))
        for i in range(0, len(ready), batch):
            with ctx.lock:
                keep = []
                for job, new, live, accrued in ready[i:i + batch]:
                    if (ctx.store.job(job.id) is job and ctx.live.jobs.get(job.id) is live
                            and live.accrued_to == accrued):
                        live.accrued_to = now
                        keep.append(new)
                if keep:  # an empty save would still drop the memory store's sorted view
                    ctx.store.save_progress(keep)

    # -- admission ------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, by: str = "") -> JobRecord:
        """`by`: who submitted it, for the history (an admin on behalf of `spec.user` says so)."""
        ctx = self.ctx
        with ctx.lock:
            clash = ctx.store.active_named(spec.name)
            if clash:
                raise AlreadyExists(
                    f"spec.name: job {spec.name!r} already exists (id {clash[0].id}, {clash[0].state.value})"
                )
            now = ctx.clock.now()
            job = JobRecord(
                id=ctx.store.next_job_id(),
                spec=spec,
                token=secrets.token_urlsafe(32),
                submitted_at=now,
                state=JobState.SUBMITTED,
                history=(Transition(None, JobState.SUBMITTED, f"submitted by {by}" if by else "submitted", now),),
            )
            source = ctx.profiles.source(job)
            if ctx.profiles.needs_profiling(job):
                job = job.to(
                    JobState.PROFILING,
                    f"to be profiled live ({job.spec.profile_search} search): waiting for a node to profile on",
                    now,
                    profile_source=source,
                )
            else:
                job = job.to(JobState.PROFILING, "resolving the sensitivity profile", now)
                why = ctx.profiles.why_not_profiled(job)
                job = job.to(
                    JobState.QUEUED, f"profile: {source}{f' ({why})' if why else ''}; waiting for the next round", now,
                    profile_source=source,
                )
            ctx.save_jobs([(None, job)])
            event(ctx.log, "job.submitted", job=job.id, job_name=job.name, gpus=spec.gpus, profile=source,
                  user=spec.user, by=by)
            return job

    def cancel(self, ref: int | str | JobRecord, reason: str, by: str = "") -> JobRecord:
        """`by`: who cancelled it, for the history."""
        ctx = self.ctx
        with ctx.lock:
            job = self.get(ref.id) if isinstance(ref, JobRecord) else self.find(ref)
            if job.state == JobState.CANCELLED:
                return job
            if job.state.terminal:
                raise FailedPrecondition(f"job {job.id} already ended ({job.state.value}); nothing to cancel")
            now = ctx.clock.now()
            who = f" by {by}" if by else ""
            new = self.with_progress(job, now).to(JobState.CANCELLED, f"cancelled{who}: {reason or 'no reason given'}", now)
            ctx.save_jobs([(job, new)])
            event(ctx.log, "job.cancelled", job=job.id, reason=reason, by=by)
            return new

    # -- lifecycle moves (caller holds the lock and commits) -------------------------------------
    def launch(
        self,
        job: JobRecord,
        placements: Sequence[Placement],
        round_index: int,
        reason: str,
        state: JobState = JobState.RUNNING,
        **changes: object,
    ) -> JobRecord:
        """QUEUED -> RUNNING, or PROFILING -> PROFILING under a profiling lease (`state`)."""
        now = self.ctx.clock.now()
        new = job.to(
            state,
            reason,
            now,
            placements=tuple(placements),
            attempt=job.attempt + 1,
            round_index=round_index,
            next_placements=(),
            waiting_reason="",
            started_at=job.started_at or now,
            **changes,
        )
        self.ctx.live.job(new.id, new.attempt, now)
        event(
            self.ctx.log,
            "job.placed",
            job=job.id,
            attempt=new.attempt,
            round=round_index,
            placements=fmt_placements(placements),
        )
        return new

    def run_on(self, job: JobRecord) -> JobRecord:
        """PROFILING under a lease -> RUNNING on the same placement and attempt: profiled, the
        job keeps training in its process; the next round sets its allocation."""
        event(self.ctx.log, "job.profiled", job=job.id, reason="runs on where it was profiled")
        return job.to(
            JobState.RUNNING,
            f"profiled on {fmt_placements(job.placements)}: runs on without a restart; "
            "the next round sets its allocation",
            self.ctx.clock.now(),
            profile_max_cpus=0.0,
            profile_sub_core=False,
        )

    def request_stop(
        self,
        job: JobRecord,
        reason: str,
        next_placements: Sequence[Placement] = (),
        next_packed_with: int | None = None,
    ) -> JobRecord:
        """Ask a RUNNING job to checkpoint and give its resources back (told at its next renewal).

        A job none of whose processes has been launched yet is preempted on the spot.
        `next_packed_with` goes with `next_placements` (None: the job's own, unchanged).
        """
        nxt = tuple(next_placements)
        packed = job.next_packed_with if next_packed_with is None else next_packed_with
        if job.stopping:
            return replace(job, next_placements=nxt, next_packed_with=packed)
        now = self.ctx.clock.now()
        live = self.ctx.live.jobs.get(job.id)
        launched = live is not None and live.attempt == job.attempt and (live.launched or live.ranks)
        # Running since before this daemon started: a previous daemon may have launched it.
        launched = launched or job.history[-1].at_s < self.ctx.started_at
        if not launched and not self._observed_running(job):
            return self.preempt(replace(job, next_placements=nxt, next_packed_with=packed),
                                f"{reason} (before it started)", lost=False)
        event(self.ctx.log, "job.stop_requested", job=job.id, attempt=job.attempt, reason=reason)
        return replace(job, stop_reason=reason, stop_requested_at=now, next_placements=nxt, next_packed_with=packed)

    def _observed_running(self, job: JobRecord) -> list[tuple[str, ObservedTask]]:
        """Not-yet-exited tasks of the current attempt, as reported by the nodes they are placed on."""
        return [(n, t) for n, t in self.ctx.live.tasks_of(job.id, job.attempt) if placed_on(job, t.key.rank, n)]

    def preempt(self, job: JobRecord, reason: str, lost: bool = True) -> JobRecord:
        """RUNNING -> PREEMPTED -> QUEUED, and straight on to RUNNING when a new allocation waits.

        `lost`: its processes were lost or killed, not exited after a checkpoint (a lost node or
        lease, a stop that timed out): the reason then says where it resumes and how many steps
        it lost.

        A job under a profiling lease goes back to PROFILING (placed again by the profiler's
        next pass) until its profile was reported, then on to QUEUED with that profile.
        """
        now = self.ctx.clock.now()
        if job.state == JobState.PROFILING:
            return self._profiling_ended(job, reason, now)
        nxt, packed = job.next_placements, job.next_packed_with
        job = self.with_progress(job, now)
        if lost:  # what it trained since its last checkpoint is gone; the history says how much
            reason += (f"; resumes from the checkpoint of step {job.checkpoint_step}"
                       if job.checkpoint_path else "; no checkpoint: restarts from the beginning")
            reason += f", {max(0, job.steps_done - job.checkpoint_step)} steps lost"
        job = job.to(JobState.PREEMPTED, reason, now, preemptions=job.preemptions + 1)
        job = job.to(JobState.QUEUED, "back in the queue", now)
        self.ctx.live.jobs.pop(job.id, None)
        event(self.ctx.log, "job.preempted", job=job.id, reason=reason)
        if nxt and all(self.placeable(p.server_id) for p in nxt):
            decided = job.next_round_index or job.round_index
            return self.launch(job, nxt, decided, f"relaunched with round {decided}'s allocation",
                               packed_with=packed, next_packed_with=0, next_round_index=0)
        return replace(job, next_placements=(), next_packed_with=0)

    def _profiling_ended(self, job: JobRecord, reason: str, now: float) -> JobRecord:
        job = self.with_progress(job, now)
        self.ctx.live.jobs.pop(job.id, None)
        if job.profiled:
            event(self.ctx.log, "job.profiled", job=job.id, reason=reason)
            return job.to(
                JobState.QUEUED,
                f"{reason}; profile: profiled, queued with its best-case demand",
                now,
                profile_max_cpus=0.0,
                profile_sub_core=False,
                next_placements=(),
            )
        event(self.ctx.log, "job.profiling_requeued", job=job.id, reason=reason)
        return job.to(
            JobState.PROFILING,
            f"{reason}; back to profiling: waiting for a node to profile on",
            now,
            preemptions=job.preemptions + 1,
            profile_max_cpus=0.0,
            profile_sub_core=False,
            next_placements=(),
        )

    def task_exited(
        self, job: JobRecord, rank: int, code: int, node_id: str, message: str, oom_killed: bool = False
    ) -> JobRecord | None:
        """The job after one of its current attempt's processes exited (None: nothing changes)."""
        if not job.placed:
            return None
        now = self.ctx.clock.now()
        live = self.ctx.live.job(job.id, job.attempt, now)
        live.exited[rank] = code
        others_running = bool(self._observed_running(job) or live.unfinished_ranks())
        if code == EXIT_RESTART and not job.stopping:
            job = replace(job, stop_reason="the job asked to be restarted (exit 75)", stop_requested_at=now)
        if job.stopping:
            if others_running:
                return job
            where = f"; resumes from step {job.checkpoint_step}" if job.checkpoint_path else ""
            if job.checkpoint_error:  # the stop's own checkpoint could not be written
                where += f" (its last checkpoint write failed: {job.checkpoint_error})"
            return self.preempt(replace(job, exit_code=code), f"{job.stop_reason}{where}", lost=False)
        if code == 0:
            if others_running:
                return None
            return self.with_progress(job, now).to(JobState.SUCCEEDED, "every process exited 0", now, exit_code=0)
        if code == LAUNCH_FAILED and message.startswith(f"launch failed: {IMPOSSIBLE_PLACEMENT}"):
            # The node could not hold what the daemon placed (its cores or GPUs were not free
            # as counted): the daemon's mistake, not the job's. Back to the queue, saying so.
            why = f"rank {rank} on node {node_id} could not be launched ({message})"
            if others_running:  # the other ranks stop first; their exits requeue the job
                return self.request_stop(job, why)
            return self.preempt(job, f"{why}; requeued", lost=False)  # it never ran: nothing lost
        detail = f": {message}" if message else ""
        # The agent says OOM as a flag: the reason never depends on the wording of its message.
        how = "was killed by its memory limit (OOM)" if oom_killed else f"exited with code {code}"
        return self.with_progress(job, now).to(
            JobState.FAILED, f"rank {rank} on node {node_id} {how}{detail}", now, exit_code=code
        )

    def partner_left(self, job: JobRecord, host: JobRecord | None) -> str:
        """Why a placed packed job may no longer run on its host's GPUs ("" = it may).

        Its GPUs are its host's only while the host holds them, unmoved and not stopping;
        otherwise the packed job would keep GPUs nobody accounts for.
        """
        if not job.packed_with or not job.placed or job.stopping:
            return ""
        h = job.packed_with
        if host is None or not host.placed:
            return f"job {h}, whose GPUs it shares, is no longer running"
        if host.stopping:
            return f"job {h}, whose GPUs it shares, is stopping ({host.stop_reason})"
        if _gpus_per_node(host) != _gpus_per_node(job):
            return f"job {h}, whose GPUs it shares, now holds other GPUs"
        return ""

    def placeable(self, node_id: str) -> bool:
        """Whether new work may go to the node now (a round's plan may predate a drain or a loss)."""
        node = self.ctx.store.node(node_id)
        live = self.ctx.live.nodes.get(node_id)
        return node is not None and node.admin_state != AdminState.DRAINING and live is not None and not live.lost


def _progress(job: JobRecord, live: JobLive, accrued_to: float, now: float) -> tuple[int, float, float] | None:
    """(steps done, samples/s, GPU-seconds) of `job` at `now`, its GPU-seconds counted up to
    `accrued_to`; None when the live entry is not of the job's placed attempt."""
    if not job.placed or live.attempt != job.attempt:
        return None
    gpus = sum(p.gpus for p in job.placements)
    return max(job.steps_done, live.step), live.samples_per_s, job.attained_gpu_s + gpus * max(0.0, now - accrued_to)
