"""AdminService: the CLI's view of the daemon (messages in, logic calls, messages out)."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import replace
from typing import AsyncIterator

import grpc

from synergy.scheduler.daemon import paging, validation
from synergy.scheduler.daemon.auth import audit_note, caller_of
from synergy.scheduler.daemon.errors import FailedPrecondition, InvalidArgument, PermissionDenied
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.jobs import JobBook
from synergy.scheduler.daemon.live import JobLive, TaskKey, TaskPhase
from synergy.scheduler.daemon.tasklogs import find_task, last_lines
from synergy.scheduler.daemon.nodes import NodeBook
from synergy.scheduler.daemon.records import JobRecord, JobState
from synergy.scheduler.daemon.rounds import RoundLoop
from synergy.scheduler.daemon.users import Caller, UserBook, UserRecord, check_owner, job_owner, usage_by_user
from synergy.scheduler.daemon.servicers import convert
from synergy.scheduler.daemon.servicers.base import Servicer, rpc, stream_rpc
from synergy.scheduler.model import Cluster, Resources
from synergy.scheduler.statedir import TEMP_PREFIX, StateDirError
from synergy.v1 import admin_pb2, admin_pb2_grpc, common_pb2

VERSION = "0.1.0"
#: `synergy logs` without --lines, and the most it may ask for.
DEFAULT_LOG_LINES = 10
MAX_LOG_LINES = 10_000
#: How often TailLogs looks for newly relayed bytes.
LOG_POLL_S = 0.05
#: Backup chunk size: well under every client's default 4 MiB receive limit.
BACKUP_CHUNK_BYTES = 1024 * 1024


def proportional_share(job: JobRecord, cluster: Cluster) -> Resources | None:
    """What a GPU-proportional scheduler gives the job on `cluster` (None: a CPU-only job,
    or no node with GPUs yet). The one definition is `Cluster.proportional_share`; this only
    says when it applies, and on which GPU type: on a cluster mixing types, the share of the
    type the job runs on (what "never below proportional" is held against), else the smallest
    of any type."""
    if job.spec.cpu_only or job.spec.gpus <= 0 or not any(s.capacity.gpus > 0 for s in cluster.servers):
        return None
    if cluster.typed and job.placements:
        landed = cluster.gpu_type_of(job.placements[0].server_id)
        if landed in cluster.gpu_types:
            return cluster.proportional_share(job.spec.gpus, landed)
    return cluster.proportional_share(job.spec.gpus)


def _signed(reason: str, caller: Caller) -> str:
    """An admin action's reason with who took it (node state reasons, moved jobs' history)."""
    return f"{reason} (by {caller.name})" if reason else f"by {caller.name}"


def _user_info(user: UserRecord) -> admin_pb2.UserInfo:
    return admin_pb2.UserInfo(
        name=user.name, role=user.role, has_token=bool(user.token_sha256), created_at_unix_s=user.created_at,
        created_by=user.created_by, revoked_at_unix_s=user.revoked_at, revoked_by=user.revoked_by,
    )


class AdminServicer(Servicer, admin_pb2_grpc.AdminServiceServicer):
    def __init__(
        self, ctx: DaemonContext, jobs: JobBook, nodes: NodeBook, rounds: RoundLoop, started_at: float,
        users: UserBook,
    ) -> None:
        super().__init__(ctx)
        self.jobs, self.nodes, self.rounds, self.started_at = jobs, nodes, rounds, started_at
        self.users = users

    def _own_job(self, context: grpc.ServicerContext, ref: str, field: str = "job") -> JobRecord:
        """The job `ref` names, when the caller may act on it (PERMISSION_DENIED naming it otherwise)."""
        caller = caller_of(context)
        job = self.jobs.find(validation.job_ref(ref, field), user=caller.name)
        audit_note(context, job=job.id)
        check_owner(caller, job.id, job.spec.user)
        return job

    def _info(
        self, job: JobRecord, history: bool, full_spec: bool = True, cluster: Cluster | None = None
    ) -> admin_pb2.JobInfo:
        """`cluster` (the registered nodes, for the proportional share) is built by the caller
        once per reply, under the lock; None builds it here (the caller holds the lock)."""
        view = self.jobs.view(job)
        live: JobLive | None = self.ctx.live.jobs.get(job.id)
        expires = 0.0
        if live is not None and live.ranks:
            now = self.ctx.clock.now()
            expires = min(r.last_renewal for r in live.ranks.values()) + self.ctx.lease_grace(now)
        info = convert.job_to_info(view, history, expires, full_spec)
        share = proportional_share(job, cluster if cluster is not None else self.rounds.cluster())
        if share is not None:
            info.proportional_share.CopyFrom(convert.resources_to_msg(share))
        if history:  # DescribeJob: the current attempt's tasks with their latest usage
            tasks = sorted(self.ctx.live.tasks_of(job.id, job.attempt), key=lambda nt: nt[1].key.rank)
            info.tasks.extend(convert.task_to_info(node_id, t) for node_id, t in tasks)
            cache = self.ctx.live.cache.get(job.id)
            if cache is not None:
                info.cache.CopyFrom(common_pb2.CacheStats(**cache))
        return info

    @rpc
    def SubmitJob(
        self, request: admin_pb2.SubmitJobRequest, context: grpc.ServicerContext
    ) -> admin_pb2.SubmitJobResponse:
        if not request.HasField("spec"):
            raise InvalidArgument("spec", "is required")
        spec = validation.job_spec(
            convert.spec_from_msg(request.spec), self.ctx.config.max_job_gpus, request.spec.ByteSize()
        )
        caller = caller_of(context)
        owner = job_owner(spec.user, caller)  # the identity, not the field (admins: on behalf)
        by = caller.name if owner == caller.name else f"{caller.name} ({caller.role}) on behalf of {owner}"
        job = self.jobs.submit(replace(spec, user=owner), by=f"{by} via {caller.via}")
        audit_note(context, job=job.id, job_user=owner)
        return admin_pb2.SubmitJobResponse(job=self._info(job, history=True))

    @rpc
    def ListJobs(self, request: admin_pb2.ListJobsRequest, context: grpc.ServicerContext) -> admin_pb2.ListJobsResponse:
        paging.decode_token(request.page_token)  # a bad token is refused whatever the filter
        states = [convert.job_state_from_msg(s) for s in request.states]
        if request.states and all(s is None for s in states):
            return admin_pb2.ListJobsResponse()
        caller = caller_of(context)
        if request.all_users and not caller.admin:
            raise PermissionDenied(f"all_users: only an admin may list every user's jobs; {caller.name} sees their own")
        user = None if request.all_users else caller.name
        after = max(0, paging.decode_token(request.page_token))
        jobs = self.jobs.list([s for s in states if s is not None], request.limit, user=user, after=after,
                              count=paging.page_size(request.page_size) + 1)  # one more: is there a next page?
        chunk, next_token = paging.page(jobs, lambda j: j.id, request.page_token, request.page_size)
        with self.ctx.lock:
            cluster = self.rounds.cluster()
            infos = [self._info(j, history=False, full_spec=False, cluster=cluster) for j in chunk]
        return admin_pb2.ListJobsResponse(jobs=infos, next_page_token=next_token)

    @rpc
    def DescribeJob(
        self, request: admin_pb2.DescribeJobRequest, context: grpc.ServicerContext
    ) -> admin_pb2.DescribeJobResponse:
        job = self._own_job(context, request.job)
        with self.ctx.lock:
            return admin_pb2.DescribeJobResponse(job=self._info(job, history=True))

    @stream_rpc
    async def TailLogs(
        self, request: admin_pb2.TailLogsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[admin_pb2.LogData]:
        """The task's last lines, then (follow) new output until it exits; see tasklogs.py."""
        ctx = self.ctx
        if request.lines > MAX_LOG_LINES:
            raise InvalidArgument("lines", f"must be at most {MAX_LOG_LINES}, got {request.lines}")
        job = self._own_job(context, request.job)
        key = TaskKey(job.id, job.attempt, request.rank)
        # The first answer takes one or two heartbeats; a node that sends nothing is reported.
        patience = max(10.0, 4 * ctx.heartbeat_interval_s)
        deadline, sent_to, sent_epoch, tails = time.monotonic() + patience, -1, 0, -1
        while True:
            with ctx.lock:
                found = find_task(ctx.live.nodes, key)
                log = ctx.task_logs.get(key)
                job = ctx.store.job(job.id) or job
                placed = job.placed and request.rank < len(job.placements)
                if found is None and log is None and not placed:
                    raise FailedPrecondition(
                        f"rank: no node reports rank {request.rank} of job {job.id} attempt {job.attempt} "
                        f"(the job is {job.state.value}); output is relayed while a task is reported")
                # Launched but not reported yet: ask the node it is placed on.
                node_id = found[0] if found is not None else log.node_id if log is not None else (
                    job.placements[request.rank].server_id)
                # The first look of a reader asks for the end of the file as it is now, never
                # what an earlier reader's buffer held (tasklogs.py).
                log = ctx.task_logs.want(key, node_id, ctx.clock.now(), refresh=found is not None,
                                         fresh=tails < 0)
                if tails < 0:
                    tails = log.tails + 1
                ended = found[1].phase == TaskPhase.EXITED if found is not None else not placed
                answered = log.answered and (log.tails >= tails or sent_to >= 0)
                error, start, data, drained, epoch, gap = (
                    log.error, log.start, bytes(log.data), log.drained, log.epoch, log.gap)
            if answered and error and (ended or drained) and sent_to >= 0:
                return  # the agent let go of the task after its exit: nothing more to read
            if answered and error:
                raise FailedPrecondition(f"rank: node {node_id} cannot read the log: {error}")
            if answered and sent_to < 0:
                yield admin_pb2.LogData(data=last_lines(data, request.lines or DEFAULT_LOG_LINES),
                                        node_id=node_id, attempt=job.attempt)
                sent_to, sent_epoch = start + len(data), epoch
                if not request.follow:
                    return
            elif answered and epoch != sent_epoch:  # the relay jumped: say so, then go on from there
                yield admin_pb2.LogData(data=f"\n[synergy: {gap}]\n".encode() + data)
                sent_to, sent_epoch = start + len(data), epoch
            elif answered and start + len(data) > sent_to:
                yield admin_pb2.LogData(data=data[max(0, sent_to - start):])
                sent_to = start + len(data)
            if not answered and time.monotonic() > deadline:
                raise FailedPrecondition(f"rank: node {node_id} sent no log within {patience:g} s; is its agent up?")
            if drained and sent_to >= start + len(data):
                return  # the task has exited and its file was read to the end after that
            await asyncio.sleep(LOG_POLL_S)

    @rpc
    def CancelJob(
        self, request: admin_pb2.CancelJobRequest, context: grpc.ServicerContext
    ) -> admin_pb2.CancelJobResponse:
        reason = validation.text(request.reason, "reason")
        job = self.jobs.cancel(self._own_job(context, request.job), reason, by=caller_of(context).name)
        return admin_pb2.CancelJobResponse(job=self._info(job, history=True))

    @rpc
    def ListNodes(
        self, request: admin_pb2.ListNodesRequest, context: grpc.ServicerContext
    ) -> admin_pb2.ListNodesResponse:
        return admin_pb2.ListNodesResponse(nodes=[convert.node_to_info(v) for v in self.nodes.list()])

    @rpc
    def CordonNode(
        self, request: admin_pb2.CordonNodeRequest, context: grpc.ServicerContext
    ) -> admin_pb2.CordonNodeResponse:
        node_id, reason = self._node_args(request, context)
        return admin_pb2.CordonNodeResponse(node=convert.node_to_info(self.nodes.cordon(node_id, reason)))

    @rpc
    def DrainNode(
        self, request: admin_pb2.DrainNodeRequest, context: grpc.ServicerContext
    ) -> admin_pb2.DrainNodeResponse:
        node_id, reason = self._node_args(request, context)
        return admin_pb2.DrainNodeResponse(node=convert.node_to_info(self.nodes.drain(node_id, reason)))

    @rpc
    def ResumeNode(
        self, request: admin_pb2.ResumeNodeRequest, context: grpc.ServicerContext
    ) -> admin_pb2.ResumeNodeResponse:
        node_id, reason = self._node_args(request, context)
        return admin_pb2.ResumeNodeResponse(node=convert.node_to_info(self.nodes.resume(node_id, reason)))

    @rpc
    def LoanNodes(
        self, request: admin_pb2.LoanNodesRequest, context: grpc.ServicerContext
    ) -> admin_pb2.LoanNodesResponse:
        ids = [validation.node_id(nid, f"node_ids[{i}]") for i, nid in enumerate(request.node_ids)]
        audit_note(context, nodes=ids)
        records = self.nodes.loans.loan(ids)
        with self.ctx.lock:
            return admin_pb2.LoanNodesResponse(nodes=[convert.node_to_info(self.nodes.view(n)) for n in records])

    @rpc
    def ReclaimNodes(
        self, request: admin_pb2.ReclaimNodesRequest, context: grpc.ServicerContext
    ) -> admin_pb2.ReclaimNodesResponse:
        reason = _signed(validation.text(request.reason, "reason"), caller_of(context))
        done = self.nodes.loans.reclaim(request.count, request.deadline_s, reason)
        with self.ctx.lock:
            nodes = [convert.node_to_info(self.nodes.view(n)) for n in done.nodes]
        shrunk = [admin_pb2.ShrunkJob(job_id=j, gpus=g) for j, g in done.shrunk.items()]
        return admin_pb2.ReclaimNodesResponse(nodes=nodes, preempted_job_ids=list(done.preempted), shrunk=shrunk)

    @staticmethod
    def _node_args(request: admin_pb2.CordonNodeRequest, context: grpc.ServicerContext) -> tuple[str, str]:
        """The node and the reason, which says who acted (it reaches the moved jobs' history)."""
        node_id, reason = validation.node_id(request.node_id), validation.text(request.reason, "reason")
        audit_note(context, node=node_id)
        return node_id, _signed(reason, caller_of(context))

    @rpc
    def GetClusterStatus(
        self, request: admin_pb2.GetClusterStatusRequest, context: grpc.ServicerContext
    ) -> admin_pb2.GetClusterStatusResponse:
        with self.ctx.lock:
            views = self.nodes.list()
            counts = {s: n for s, n in self.ctx.store.state_counts().items() if n}
            users = usage_by_user(self.ctx.store.active_jobs())
        capacity, allocated = Resources(), Resources()
        for v in views:
            if v.state in ("ready", "cordoned"):
                capacity = capacity + v.record.allocatable
                allocated = allocated + v.allocated
        rounds = self.rounds
        return admin_pb2.GetClusterStatusResponse(
            policy=rounds.policy,
            mechanism=rounds.mechanism,
            round_s=self.ctx.config.round_s,
            round_index=rounds.round_index,
            next_round_at_unix_s=rounds.next_boundary,
            last_decision_ms=rounds.last_decision_s * 1000,
            capacity=convert.resources_to_msg(capacity),
            allocated=convert.resources_to_msg(allocated),
            free=convert.resources_to_msg(capacity - allocated),
            nodes_total=len(views),
            nodes_ready=sum(1 for v in views if v.state == "ready"),
            job_counts=[
                admin_pb2.JobStateCount(state=convert.job_state_to_msg(s), count=n)
                for s, n in sorted(counts.items(), key=lambda kv: convert.job_state_to_msg(kv[0]))
            ],
            daemon_version=VERSION,
            started_at_unix_s=self.started_at,
            max_job_gpus=self.ctx.config.max_job_gpus,
            cpu_array=admin_pb2.CpuArraySettings(
                borrow_fraction=self.ctx.config.borrow_fraction, trim_training=self.ctx.config.trim_training
            ),
            users=[admin_pb2.UserUsage(user=u.user, running_jobs=u.running, waiting_jobs=u.waiting,
                                       allocated=convert.resources_to_msg(u.allocated)) for u in users.values()],
        )

    @rpc
    def SetPolicy(
        self, request: admin_pb2.SetPolicyRequest, context: grpc.ServicerContext
    ) -> admin_pb2.SetPolicyResponse:
        policy, mechanism = self.rounds.set_policy(
            validation.text(request.policy, "policy", 64), validation.text(request.mechanism, "mechanism", 64)
        )
        audit_note(context, policy=policy, mechanism=mechanism)
        return admin_pb2.SetPolicyResponse(policy=policy, mechanism=mechanism)

    # -- users (users.py; the guard lets only admins at AddUser, ListUsers, RevokeUser) ---------------
    @rpc(on_loop=True)
    def WhoAmI(self, request: admin_pb2.WhoAmIRequest, context: grpc.ServicerContext) -> admin_pb2.WhoAmIResponse:
        caller = caller_of(context)
        return admin_pb2.WhoAmIResponse(user=caller.name, role=caller.role, via=caller.via)

    @rpc
    def AddUser(self, request: admin_pb2.AddUserRequest, context: grpc.ServicerContext) -> admin_pb2.AddUserResponse:
        audit_note(context, target_user=request.name[:64], target_role=request.role[:16] or "user")
        user, token = self.users.add(request.name, request.role or "user", caller_of(context).name,
                                     token=not request.no_token)
        return admin_pb2.AddUserResponse(user=_user_info(user), token=token)

    @rpc
    def ListUsers(
        self, request: admin_pb2.ListUsersRequest, context: grpc.ServicerContext
    ) -> admin_pb2.ListUsersResponse:
        return admin_pb2.ListUsersResponse(users=[_user_info(u) for u in self.users.list()])

    @rpc
    def RevokeUser(
        self, request: admin_pb2.RevokeUserRequest, context: grpc.ServicerContext
    ) -> admin_pb2.RevokeUserResponse:
        audit_note(context, target_user=request.name[:64])
        return admin_pb2.RevokeUserResponse(user=_user_info(self.users.revoke(request.name, caller_of(context).name)))

    @stream_rpc
    async def BackupDatabase(
        self, request: admin_pb2.BackupDatabaseRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[admin_pb2.BackupDatabaseChunk]:
        # The snapshot is taken on a worker thread (it reads the whole file) into a temp file in
        # the state dir, so the event loop keeps serving; stale temp files go at the next start.
        tmp = self.ctx.config.state_dir / f"{TEMP_PREFIX}backup.{secrets.token_hex(4)}.sqlite"
        try:
            try:
                summary = await asyncio.to_thread(self.ctx.store.snapshot, tmp)
            except (OSError, StateDirError) as exc:
                why = getattr(exc, "strerror", None) or str(exc)
                raise FailedPrecondition(f"cannot take a snapshot of the database ({why})") from None
            first = admin_pb2.BackupDatabaseChunk(
                total_bytes=summary.size_bytes,
                jobs=summary.jobs,
                nodes=summary.nodes,
                schema_version=summary.schema_version,
            )
            with open(tmp, "rb") as f:
                while data := f.read(BACKUP_CHUNK_BYTES):
                    if first is not None:
                        first.data = data
                        yield first
                        first = None
                    else:
                        yield admin_pb2.BackupDatabaseChunk(data=data)
            if first is not None:  # never: a database has at least one page
                yield first
        finally:
            tmp.unlink(missing_ok=True)
