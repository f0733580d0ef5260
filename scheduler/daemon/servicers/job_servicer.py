"""JobService: what the iterator inside each job process calls (messages <-> LeaseBook)."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import AsyncIterator, overload

import grpc

from synergy.scheduler.daemon import validation
from synergy.scheduler.daemon.auth import caller_job
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.errors import InvalidArgument
from synergy.scheduler.daemon.leases import LeaseAction, LeaseBook, LockBusy
from synergy.scheduler.daemon.records import JobRecord
from synergy.scheduler.daemon.servicers import convert
from synergy.scheduler.daemon.servicers.base import Servicer, failure, rpc
from synergy.scheduler.model import Placement
from synergy.v1 import job_pb2, job_pb2_grpc

_ACTIONS = {
    LeaseAction.CONTINUE: job_pb2.LEASE_ACTION_CONTINUE,
    LeaseAction.STOP: job_pb2.LEASE_ACTION_STOP,
    LeaseAction.TERMINATE: job_pb2.LEASE_ACTION_TERMINATE,
}


@dataclass(slots=True)
class _Answer:
    """A rank's last answer and what it was built from: the record (`_same_terms`), the
    action, and the allocation its agent reported in force. The renewal interval is the
    daemon's and never changes; a profiling lease is never kept."""

    job: JobRecord
    action: LeaseAction
    in_force: tuple[Placement, tuple[int, ...]] | None
    reply: job_pb2.RenewLeaseResponse


def _same_terms(kept: JobRecord, job: JobRecord) -> bool:
    """Whether `job` gives the answer `kept` did: the same record, or one that differs only
    where a renewal's answer does not read (the progress a flush writes every few seconds:
    steps, GPU-seconds, throughput)."""
    return kept is job or (kept.attempt == job.attempt and kept.round_index == job.round_index
                           and kept.placements == job.placements and kept.stop_at_step == job.stop_at_step
                           and kept.stop_reason == job.stop_reason)


class JobServicer(Servicer, job_pb2_grpc.JobServiceServicer):
    def __init__(self, ctx: DaemonContext, leases: LeaseBook) -> None:
        super().__init__(ctx)
        self.leases = leases
        #: The handler tasks of the open RenewLeaseStreams (loop thread only).
        self._streams: set[asyncio.Task[None]] = set()
        self._ending = False
        #: Each rank's last answer, by (job id, rank): a renewal that changes nothing but its
        #: lease's expiry and the checkpoint step copies it (0.6 us) instead of building one (3.9 us).
        self._answers: dict[tuple[int, int], _Answer] = {}
        self._prune_at = 1024

    def _caller(self, context: grpc.ServicerContext) -> int:
        return caller_job(context, self.ctx.job_tokens)

    def _lease(self, job: JobRecord, expires_at: float) -> job_pb2.Lease:
        """The lease a renewal answers with: reads only what `_same_terms` compares."""
        return job_pb2.Lease(
            job_id=job.id,
            attempt=job.attempt,
            expires_at_unix_s=expires_at,
            placements=[convert.placement_to_msg(p) for p in job.placements],
            round_index=job.round_index,
        )

    def _profiling(self, job: JobRecord) -> job_pb2.ProfilingLease | None:
        """The profiling lease's terms (None for an ordinary lease); under Slurm, a job whose
        profile is measured where it runs gets `in_force_only` terms (profiles.measures_in_force):
        on one node only, as a profiling lease, since rank 0 sees only its own CPUs."""
        if not job.profiling_lease:
            if len(job.placements) != 1 or not self.ctx.profiles.measures_in_force(job):
                return None
            return job_pb2.ProfilingLease(search=job.spec.profile_search, task=job.spec.task, gpus=job.spec.gpus,
                                          max_mem_gb=job.placements[0].mem_gb, in_force_only=True)
        p = job.placements[0]
        return job_pb2.ProfilingLease(
            search=job.spec.profile_search,
            max_cpus=int(job.profile_max_cpus),
            task=job.spec.task,
            gpus=job.spec.gpus,
            max_mem_gb=p.mem_gb,
            sub_core=job.profile_sub_core,
        )

    @rpc
    def RegisterJobProcess(
        self, request: job_pb2.RegisterJobProcessRequest, context: grpc.ServicerContext
    ) -> job_pb2.RegisterJobProcessResponse:
        validation.text(request.node_id, "node_id", 128)
        validation.text(request.hostname, "hostname", 256)
        job, expires = self.leases.register_process(
            self._caller(context), request.job_id, request.attempt, request.rank, request.world_size
        )
        return job_pb2.RegisterJobProcessResponse(
            lease=self._lease(job, expires),
            renew_interval_s=self.ctx.renew_interval_s,
            resume_checkpoint_path=job.checkpoint_path,
            resume_step=job.checkpoint_step,
            profiling=self._profiling(job),
        )

    @rpc
    def ReportProfile(
        self, request: job_pb2.ReportProfileRequest, context: grpc.ServicerContext
    ) -> job_pb2.ReportProfileResponse:
        caller = self._caller(context)
        if not request.HasField("profile"):
            raise InvalidArgument("profile", "is required")
        if request.profile.ByteSize() > validation.MAX_SPEC_BYTES:
            raise InvalidArgument("profile", f"is larger than {validation.MAX_SPEC_BYTES} bytes")
        doc = convert.profile_from_msg(request.profile)
        validation.profile(doc, request.profile.model or f"job-{request.job_id}", "profile")
        return job_pb2.ReportProfileResponse(profile_source=self.leases.report_profile(caller, request.job_id, doc))

    @rpc(on_loop=True)  # hot and lock-free in the common case: no thread hand-off
    async def RenewLease(
        self, request: job_pb2.RenewLeaseRequest, context: grpc.ServicerContext
    ) -> job_pb2.RenewLeaseResponse:
        return await self._renewed(self._caller(context), request)

    async def RenewLeaseStream(
        self, requests: AsyncIterator[job_pb2.RenewLeaseRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[job_pb2.RenewLeaseStreamResponse]:
        """RenewLease, one answer per message on a stream the job keeps open (on the loop, as
        RenewLease). The token is read once; a message that fails is answered with its code
        and the stream goes on. `end_streams` ends every open stream when the daemon stops."""
        caller = self._caller(context)
        task = asyncio.current_task()
        assert task is not None
        limit = self.ctx.config.max_renewal_streams
        if len(self._streams) >= limit:
            # The job's wrap renews by RenewLease calls instead, for a while (iterator/lease.py).
            self.ctx.metrics.rpc_errors.labels("RenewLeaseStream", grpc.StatusCode.RESOURCE_EXHAUSTED.name).inc()
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"{limit} renewal streams are open (--max-renewal-streams); renew with RenewLease")
        self._streams.add(task)
        unanswered = -1  # messages left unanswered since this stream's last answer (-1: none yet)
        try:
            async for request in requests:
                try:
                    quiet = 0 <= unanswered < request.answer_every - 1
                    reply = await self._renewed(caller, request, quiet)
                    if reply is None:
                        unanswered += 1
                        continue
                    unanswered = 0
                    yield job_pb2.RenewLeaseStreamResponse(reply=reply)
                except Exception as exc:  # noqa: BLE001 (as @rpc: a bad message never ends the daemon)
                    code, message = failure(self, "RenewLeaseStream", exc)
                    self.ctx.metrics.rpc_errors.labels("RenewLeaseStream", code.name).inc()
                    unanswered = min(unanswered, 0)  # heard from; still no reply on this stream if none yet
                    yield job_pb2.RenewLeaseStreamResponse(code=code.value[0], message=message)
        except asyncio.CancelledError:
            if not self._ending:
                raise  # the job cancelled its call
            await context.abort(grpc.StatusCode.UNAVAILABLE, "synergyd is stopping; renew again once it is back")
        finally:
            self._streams.discard(task)

    def end_streams(self) -> None:
        """End every open RenewLeaseStream with UNAVAILABLE (on the loop, before the server
        stops): a stream never ends by itself, so the server's grace period would otherwise
        wait for all of them. Their jobs renew with RenewLease and open a new stream once the
        daemon is back."""
        self._ending = True
        for task in list(self._streams):
            task.cancel()

    @overload
    async def _renewed(self, caller: int, request: job_pb2.RenewLeaseRequest) -> job_pb2.RenewLeaseResponse: ...

    @overload
    async def _renewed(self, caller: int, request: job_pb2.RenewLeaseRequest,
                       quiet: bool) -> job_pb2.RenewLeaseResponse | None: ...

    async def _renewed(self, caller: int, request: job_pb2.RenewLeaseRequest,
                       quiet: bool = False) -> job_pb2.RenewLeaseResponse | None:
        """The renewal on the loop; when its answer needs the state lock (agreeing a stop step)
        and a round or periodic event holds it, the wait goes to the loop's executor thread,
        as @rpc's handlers do: the loop, and every other renewal, never waits for the lock.
        `quiet`: None instead of an answer that would repeat the rank's last one."""
        try:
            return self._renew(caller, request, False, quiet)
        except LockBusy:
            return await asyncio.get_running_loop().run_in_executor(None, self._renew, caller, request, True, quiet)

    def _renew(self, caller: int, request: job_pb2.RenewLeaseRequest, wait: bool,
               quiet: bool = False) -> job_pb2.RenewLeaseResponse | None:
        """The renewal's answer; with `quiet`, None when it is the rank's last answer with
        only a later expiry (the job does not read the expiry: the daemon decides when a lease
        is lost). The renewal itself is recorded either way."""
        validation.answer_every(request.answer_every)
        r = self.leases.renew(
            caller,
            request.job_id,
            request.attempt,
            request.rank,
            validation.counter(request.step, "step"),
            request.samples_per_s,
            request.steps_per_s,
            _point(request),
            validation.cache_stats(request.cache, "cache") if request.HasField("cache") else None,
            wait=wait,
        )
        t = r.in_force
        in_force = (t.placement, t.cores) if t is not None and t.placement is not None else None
        profiling = self._profiling(r.job)
        key = (request.job_id, request.rank)
        last = self._answers.get(key)
        interval = self.ctx.renew_interval_s
        if last is not None and last.action is r.action and last.in_force == in_force and profiling is None \
                and last.reply.renew_interval_s == interval and _same_terms(last.job, r.job):
            last.job = r.job  # the next renewal's identity check then holds
            moved = last.reply.checkpoint_at_step != r.checkpoint_at_step
            if quiet and not moved:
                return None
            reply = job_pb2.RenewLeaseResponse()
            reply.CopyFrom(last.reply)
            reply.lease.expires_at_unix_s = r.expires_at
            reply.checkpoint_at_step = r.checkpoint_at_step
            if moved:
                last.reply = reply  # what a quiet renewal compares with
            return reply
        reply = job_pb2.RenewLeaseResponse(
            action=_ACTIONS[r.action],
            lease=self._lease(r.job, r.expires_at),
            stop_at_step=r.stop_at_step,
            checkpoint_at_step=r.checkpoint_at_step,
            reason=r.reason,
            renew_interval_s=interval,
            profiling=profiling,
        )
        if in_force is not None:
            placement, cores = in_force
            reply.in_force.CopyFrom(
                job_pb2.Allocation(cpus=placement.cpus, cores=list(cores), mem_gb=placement.mem_gb, known=True)
            )
        if r.action is LeaseAction.TERMINATE or profiling is not None:
            self._answers.pop(key, None)
        else:
            self._remember(key, _Answer(r.job, r.action, in_force, reply))
        return reply

    def _remember(self, key: tuple[int, int], answer: _Answer) -> None:
        """Keep a rank's answer; past a bound that doubles with the kept ones, drop the answers
        of jobs with no live attempt (they ended without renewing again), so the cache stays
        the size of the running ranks. A copy of the items, since an executor-thread renewal
        (LockBusy) may add one meanwhile: a dropped answer only costs a rebuild."""
        answers = self._answers
        answers[key] = answer
        if len(answers) > self._prune_at:
            live = self.ctx.live.jobs
            self._answers = {k: a for k, a in list(answers.items()) if k[0] in live}
            self._prune_at = 2 * len(self._answers) + 1024

    @rpc
    def ReportCheckpoint(
        self, request: job_pb2.ReportCheckpointRequest, context: grpc.ServicerContext
    ) -> job_pb2.ReportCheckpointResponse:
        if not request.path and not request.error:
            raise InvalidArgument("path", "must not be empty (or give error: the write failed)")
        if request.path and request.error:
            raise InvalidArgument("error", "must be empty with a path: a checkpoint was written or it failed")
        validation.os_path(request.path, "path")
        validation.text(request.error, "error")
        step = self.leases.report_checkpoint(
            self._caller(context),
            request.job_id,
            request.attempt,
            validation.counter(request.step, "step"),
            request.path,
            request.error,
        )
        return job_pb2.ReportCheckpointResponse(resume_step=step)

    @rpc
    def ReportCompletion(
        self, request: job_pb2.ReportCompletionRequest, context: grpc.ServicerContext
    ) -> job_pb2.ReportCompletionResponse:
        if request.outcome not in (job_pb2.COMPLETION_OUTCOME_SUCCEEDED, job_pb2.COMPLETION_OUTCOME_FAILED):
            raise InvalidArgument("outcome", "must be COMPLETION_OUTCOME_SUCCEEDED or COMPLETION_OUTCOME_FAILED")
        state = self.leases.report_completion(
            self._caller(context),
            request.job_id,
            request.attempt,
            request.outcome == job_pb2.COMPLETION_OUTCOME_SUCCEEDED,
            validation.counter(request.step, "step"),
            validation.text(request.message, "message"),
        )
        return job_pb2.ReportCompletionResponse(state=convert.job_state_to_msg(state))


def _point(request: job_pb2.RenewLeaseRequest) -> float:
    """The profiling point asked for: `profile_sub_cpus` below one CPU, else `profile_cpus`."""
    if request.profile_sub_cpus and request.profile_cpus:
        raise InvalidArgument("profile_sub_cpus", "ask for one point at a time: profile_cpus or profile_sub_cpus")
    if not math.isfinite(request.profile_sub_cpus) or request.profile_sub_cpus < 0:
        raise InvalidArgument("profile_sub_cpus", f"must be a finite number >= 0, got {request.profile_sub_cpus}")
    return request.profile_sub_cpus or request.profile_cpus
