"""The background half of the iterator: register, renew the lease, report progress.

The training thread and this thread share plain attributes only: the training thread writes
`step` (an int) and reads `stop_at` / `checkpoint_at` / `terminate`; this thread writes those
and reads `step`.
Under a profiling lease also: this thread writes `profiling` (the lease's terms) and
`in_force` (the allocation the agent applied, a tuple replaced whole); the training thread
writes `want_cpus` (the next point) and hands a finished measurement over as `profile_job`
(a callable that completes the profile, run on a thread of its own: it reads the dataset's
files from the disk for up to `STORAGE_BUDGET_S`, longer than a profiling lease may go without
a renewal; this thread reports its result with `ReportProfile` once it is ready).
With a MinIO cache (`cache`), renewals carry its statistics and a changed memory allocation
resizes it to what the new allocation affords (`MinioCache.capacity_for`).
Single attribute reads and writes are atomic in CPython, so the per-batch path takes no lock
and does no I/O. While the daemon is unreachable the thread retries with jittered back-off and
training goes on under the current lease (the daemon, not the job, decides when it is lost).
Renewals go as messages on one RenewLeaseStream the thread keeps open (a third of a unary
call's gRPC CPU for the daemon); when the stream breaks (daemon restart) that renewal goes by
RenewLease, retried as every call is, and the next renewal opens a new stream. A daemon
without the stream (UNIMPLEMENTED) gets RenewLease calls from then on. The stream is closed
before every fork and reopened after it.
A stream's first renewal waits for its answer (that is where a daemon refuses the stream);
later ones ask for an answer only every few messages (`answer_every_for`: once per
`ANSWER_WITHIN_S` of renewals, every 10th at the most) or when it changes: the daemon writes
that many fewer answers, and this thread applies each answer as it arrives, waiting on the
stream between renewals, so a STOP takes effect as soon as it comes. A renewal owed an answer
that gets none within `RPC_TIMEOUT_S` breaks the stream, as an unanswered exchange did.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import weakref
from typing import Any

import grpc

from synergy.common.channel import (RPC_TIMEOUT_S, Backoff, MessageStream, StreamBroken, open_channel,
                                    stream_answer)
from synergy.common.contract import JobEnv
from synergy.profiler.live import ProfilingTerms
from synergy.v1 import common_pb2, job_pb2, job_pb2_grpc

log = logging.getLogger("synergy.iterator")

_RETRY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
#: A renewal stream asks for an answer at least once per this many seconds of renewals (the
#: messages between are answered when their answer changes; RenewLeaseRequest.answer_every),
#: and at least every `MAX_ANSWER_EVERY`-th message.
ANSWER_WITHIN_S = 10.0
MAX_ANSWER_EVERY = 10
#: After the daemon refused a renewal stream for want of room (--max-renewal-streams), renew
#: by RenewLease calls this long before asking again: not a refused stream per renewal.
STREAMS_FULL_RETRY_S = 300.0


def say(msg: str) -> None:
    """One line on the job's stderr (the agent's log tail carries it into describe)."""
    print(f"synergy.iterator: {msg}", file=sys.stderr, flush=True)


class LeaseKeeper:
    """Owns the JobService channel and the renewal thread of one job process."""

    def __init__(self, env: JobEnv, samples_per_step: int, streamed: bool = True) -> None:
        self.env = env
        self.samples_per_step = samples_per_step
        self.channel = open_channel(env.daemon_address, env.tls_ca)
        self.stub = job_pb2_grpc.JobServiceStub(self.channel)
        self.md = [("authorization", f"Bearer {env.job_token}")]
        #: Renew on a RenewLeaseStream (False: RenewLease calls only, e.g. an older daemon).
        self.streamed = streamed
        self._stream: MessageStream | None = None
        self.streams_opened = 0
        #: Renewal messages on a stream ask for an answer at least this often (None: from the
        #: renewal interval, `answer_every_for`; 1: every message).
        self.answer_every: int | None = None
        #: Messages sent on the open stream since its last answer, and when the one owed an
        #: answer went (monotonic; 0: none owed).
        self._quiet_sent = 0
        self._owed_since = 0.0
        #: The last renewal sent on the stream without waiting: sent again by RenewLease if
        #: the stream breaks before it was answered.
        self._unanswered: job_pb2.RenewLeaseRequest | None = None
        #: Monotonic time before which no stream is asked for: the daemon had no room for one.
        self._streams_full_until = 0.0
        self.streams_full_retry_s = STREAMS_FULL_RETRY_S
        #: Job-wide completed steps; written by the training thread only.
        self.step = env.resume_step
        #: 0 = keep going; otherwise the last step to run before checkpointing (this thread writes).
        self.stop_at = 0
        self.stop_reason = ""
        self.terminate = False
        #: A periodic checkpoint after this step, agreed for every rank (0 = none due; this thread writes).
        self.checkpoint_at = 0
        #: Monotonic time the STOP reply arrived (for the STOP → exit 75 figure).
        self.stop_received_s = 0.0
        self.interval_s = 1.0
        #: Renewals sent, and answers applied (fewer on a stream: `answer_every`).
        self.sent = 0
        self.renewals = 0
        #: How long the final reports (checkpoint, completion) wait for a daemon that is down.
        self.report_patience_s = 60.0
        #: Set once RegisterJobProcess answered (then `profiling` is final for this attempt).
        self.registered = threading.Event()
        #: The profiling lease's terms (None: an ordinary lease).
        self.profiling: ProfilingTerms | None = None
        #: (cpus, cores, mem_gb) the agent applied, from the latest reply ((0, (), 0) = unknown).
        self.in_force: tuple[float, tuple[int, ...], float] = (0.0, (), 0.0)
        #: Training thread: the CPU count of the next profiling point (0 = none).
        self.want_cpus = 0
        #: Training thread: a callable returning the profile document to report (run here once).
        self.profile_job: Any = None
        self.profile_source = ""
        #: (model, doc) of the newest completed profile not reported yet: written by the
        #: completion threads (under `_profile_lock`), taken by this one.
        self._profile_ready: Any = None
        self._profile_seq = self._profile_newest = 0
        self._profile_lock = threading.Lock()
        #: The job's MinIO cache (synergy.cache.MinioCache) when its dataset reads through one.
        self.cache: Any = None
        self._cache_mem_gb = float(env.alloc_mem_gb or 0.0)
        self._closed = threading.Event()
        #: No RPC is in flight across a fork (DataLoader workers start at every epoch and at
        #: every profiling point): a child forked while one was hangs for good in gRPC's fork
        #: handler (`Channel._close_on_fork`). A fork waits for the call in flight and holds
        #: new ones back until it is done (a plain lock would starve it: this thread takes
        #: it again at once).
        self._rpc = threading.Condition()
        self._in_rpc = False
        self._forking = False
        _pause_rpcs_across_forks(self)
        self._thread = threading.Thread(target=self._run, daemon=True, name="synergy-lease")

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._end_stream()  # wakes the thread waiting for an answer on it
        if self._thread.is_alive():
            self._thread.join(timeout=RPC_TIMEOUT_S + 1)
        self._end_stream()
        self.channel.close()

    def _end_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def before_fork(self) -> None:
        """Wait for an RPC in flight (bounded by its deadline) and start no new one until the
        fork is done: gRPC's fork support cannot close a channel with a call in flight."""
        with self._rpc:
            self._forking = True
            self._rpc.wait_for(lambda: not self._in_rpc, timeout=RPC_TIMEOUT_S + 1)
            self._end_stream()  # an open stream is a call in flight

    def after_fork_in_parent(self) -> None:
        with self._rpc:
            self._forking = False
            self._rpc.notify_all()

    # -- calls -------------------------------------------------------------------------------------
    def call(self, name: str, request: Any, give_up_after_s: float = float("inf")) -> Any:
        """One RPC, retried with back-off while the daemon is down; None when closed or gave up."""
        backoff = Backoff(initial_s=0.1, max_s=2.0)
        deadline = time.monotonic() + give_up_after_s
        while not self._closed.is_set():
            try:
                return self._guarded(getattr(self.stub, name), request, metadata=self.md, timeout=RPC_TIMEOUT_S)
            except grpc.RpcError as exc:
                if exc.code() not in _RETRY:
                    _refused(name, exc)
                    return None
                if time.monotonic() >= deadline:
                    return None
                self._closed.wait(backoff.next())
        return None

    def renew(self, request: job_pb2.RenewLeaseRequest) -> Any:
        """One renewal: a message on the stream, or RenewLease when the stream is off or broke.
        The answer, or None: refused, or sent on an open stream without waiting (its answer,
        if any, comes to `_wait_for_answers`)."""
        self.sent += 1
        if self.streamed and time.monotonic() >= self._streams_full_until and not self._closed.is_set():
            try:
                return self._guarded(self._exchange, request)
            except StreamBroken as exc:
                self._stream_broke(exc)
            except grpc.RpcError as exc:  # this message refused (StreamRefused); the stream goes on
                if exc.code() not in _RETRY:
                    _refused("RenewLease", exc)
                    return None
        return self.call("RenewLease", request)

    def _exchange(self, request: job_pb2.RenewLeaseRequest) -> Any:
        stream, now = self._stream, time.monotonic()
        if stream is not None and self._owed_since and now - self._owed_since > RPC_TIMEOUT_S:
            self._end_stream()
            raise StreamBroken(f"a renewal owed an answer got none within {RPC_TIMEOUT_S:g} s",
                               grpc.StatusCode.DEADLINE_EXCEEDED)
        try:
            if stream is None:  # the first message waits: a refused stream says so in its answer
                self._stream = stream = MessageStream(self.stub.RenewLeaseStream, self.md)
                self.streams_opened += 1
                self._heard()
                return stream_answer(stream.exchange(request))
            every = self.answer_every or answer_every_for(self.interval_s)
            request.answer_every = every
            stream.send(request)
            self._unanswered = request
            self._quiet_sent += 1
            if self._quiet_sent >= every and not self._owed_since:
                self._owed_since = now  # the daemon answers this one, changed or not
            return None
        except StreamBroken:
            self._stream = None  # closed by exchange
            raise

    def _heard(self) -> None:
        self._unanswered, self._quiet_sent, self._owed_since = None, 0, 0.0

    def _stream_broke(self, exc: StreamBroken) -> None:
        if exc.code == grpc.StatusCode.UNIMPLEMENTED:
            self.streamed = False
            log.info("the daemon has no RenewLeaseStream: renewing with RenewLease calls")
        elif exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            self._streams_full_until = time.monotonic() + self.streams_full_retry_s
            log.info("the daemon has no room for another renewal stream (%s): renewing with RenewLease "
                     "calls, a stream again in %g s", exc, self.streams_full_retry_s)
        else:
            log.info("renewal stream broken (%s): renewing with RenewLease, a new stream next time", exc)

    def _wait_for_answers(self, wait_s: float) -> bool:
        """Wait `wait_s` for the next renewal, applying the open stream's answers as they come;
        True once the thread is to end (closed, or told to terminate). A stream that breaks
        meanwhile has its unanswered renewal sent again by RenewLease."""
        deadline = time.monotonic() + wait_s
        while not self._closed.is_set():
            stream, left = self._stream, deadline - time.monotonic()
            if left <= 0:
                return False
            if stream is None:
                return self._closed.wait(left)
            try:
                answer = stream.answer(left)
            except StreamBroken as exc:
                if self._stream is stream:
                    self._stream = None
                self._stream_broke(exc)
                request, self._unanswered = self._unanswered, None
                r = None if request is None or self._closed.is_set() else self.call("RenewLease", request)
                if r is not None and self._apply(r):
                    return True
                continue
            if answer is None:  # no answer yet, or the stream was closed here (a fork, close)
                continue
            self._heard()
            try:
                r = stream_answer(answer)
            except grpc.RpcError as exc:  # that renewal refused; the stream goes on
                if exc.code() not in _RETRY:
                    _refused("RenewLease", exc)
                continue
            if self._apply(r):
                return True
        return True

    def _guarded(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)`, an RPC never in flight across a fork (`before_fork`)."""
        with self._rpc:
            self._rpc.wait_for(lambda: not self._forking)
            self._in_rpc = True
        try:
            return fn(*args, **kwargs)
        finally:
            with self._rpc:
                self._in_rpc = False
                self._rpc.notify_all()

    def _run(self) -> None:
        e = self.env
        reg = self.call("RegisterJobProcess", job_pb2.RegisterJobProcessRequest(
            job_id=e.job_id, attempt=e.attempt, rank=e.rank, world_size=e.world_size,
            node_id=e.node_id, hostname=socket.gethostname(), pid=os.getpid()))
        if reg is None:
            self.registered.set()
            return
        self._take_profiling(reg)
        self.registered.set()
        self.interval_s = reg.renew_interval_s or self.interval_s
        last_t, last_step = time.monotonic(), self.step
        # Under a profiling lease renew often: each point waits for a reply showing its RESIZE.
        while not self._wait_for_answers(self._wait_s()):
            if self.profile_job is not None:
                self._complete_profile_in_background()
            if self._profile_ready is not None:
                self._report_profile()
            now, step = time.monotonic(), self.step
            steps_per_s = (step - last_step) / max(now - last_t, 1e-6)
            last_t, last_step = now, step
            req = job_pb2.RenewLeaseRequest(
                job_id=e.job_id, attempt=e.attempt, rank=e.rank, step=step,
                samples_per_s=steps_per_s * self.samples_per_step, steps_per_s=steps_per_s,
                **_point(self.want_cpus if self.profiling is not None else 0))
            stats = self._cache_stats()
            if stats is not None:
                req.cache.CopyFrom(stats)
            r = self.renew(req)
            if r is not None and self._apply(r):
                return

    def _apply(self, r: job_pb2.RenewLeaseResponse) -> bool:
        """Take a renewal's answer; True when told to terminate."""
        self.renewals += 1
        self.interval_s = r.renew_interval_s or self.interval_s
        if r.in_force.known:
            self.in_force = (r.in_force.cpus, tuple(r.in_force.cores), r.in_force.mem_gb)
            self._resize_cache(r.in_force.mem_gb)
        if not r.HasField("profiling"):
            self.profiling = None
        if r.checkpoint_at_step:
            self.checkpoint_at = int(r.checkpoint_at_step)
        if r.action == job_pb2.LEASE_ACTION_STOP and not self.stop_at:
            self.stop_reason = r.reason
            self.stop_received_s = time.monotonic()
            self.stop_at = max(int(r.stop_at_step), self.step, 1)
            log.info("lease not renewed (%s): stopping after step %d", r.reason, self.stop_at)
        elif r.action == job_pb2.LEASE_ACTION_TERMINATE:
            self.stop_reason = r.reason
            self.terminate = True
            log.info("told to terminate: %s", r.reason)
            return True
        return False

    def _wait_s(self) -> float:
        asking = self.profiling is not None and not self.profiling.in_force_only  # points wait for replies
        return min(self.interval_s, 0.2) if asking else self.interval_s

    def _take_profiling(self, reg: Any) -> None:
        if reg.HasField("profiling"):
            p = reg.profiling
            self.profiling = ProfilingTerms(p.search, int(p.max_cpus), p.task, int(p.gpus), float(p.max_mem_gb),
                                            p.sub_core, p.in_force_only)
            log.info("profiling lease: %s", self.profiling.describe())

    def _complete_profile_in_background(self) -> None:
        """Start the finished measurement's completion (storage read, MinIO fill) on its own
        thread: renewals go on meanwhile, so the daemon never takes the job for lost."""
        job, self.profile_job = self.profile_job, None
        self._profile_seq += 1
        seq = self._profile_seq

        def complete() -> None:
            try:
                result = job()
            except Exception as exc:  # a profile that cannot be completed must not kill training
                log.warning("profiling: could not complete the profile: %s", exc)
                return
            with self._profile_lock:
                if seq > self._profile_newest:  # an older measurement never replaces a newer one
                    self._profile_newest, self._profile_ready = seq, result

        threading.Thread(target=complete, daemon=True, name="synergy-profile").start()

    def _report_profile(self) -> None:
        """Report the newest completed profile (`_complete_profile_in_background`)."""
        from synergy.scheduler.jobspec.proto import profile_to_msg

        with self._profile_lock:
            ready, self._profile_ready = self._profile_ready, None
        model, doc = ready
        r = self.call("ReportProfile", job_pb2.ReportProfileRequest(
            job_id=self.env.job_id, profile=profile_to_msg(model, doc)), give_up_after_s=self.report_patience_s)
        if r is not None:
            self.profile_source = r.profile_source
            say(f"profile reported ({doc.get('source', '')})")

    def _cache_stats(self) -> common_pb2.CacheStats | None:
        if self.cache is None:
            return None
        try:
            s = self.cache.stats()
        except (OSError, ValueError):  # the cache was closed under us: report nothing
            return None
        return common_pb2.CacheStats(hits=s.hits, hit_bytes=s.hit_bytes, misses=s.misses, miss_bytes=s.miss_bytes,
                                     items=s.items, used_bytes=s.used_bytes, capacity_bytes=s.capacity_bytes)

    def _resize_cache(self, mem_gb: float) -> None:
        """A changed memory allocation resizes the cache to what the new one affords."""
        if self.cache is None or abs(mem_gb - self._cache_mem_gb) < 1e-9:
            return
        old_gb, self._cache_mem_gb = self._cache_mem_gb, mem_gb
        try:
            capacity = self.cache.capacity_for(mem_gb)
            dropped = self.cache.resize(capacity)
            say(f"cache resized for {mem_gb:g} GB of memory (was {old_gb:g} GB): capacity {capacity} bytes, "
                f"{dropped} items dropped")
        except (OSError, ValueError) as exc:
            log.warning("cache resize for %g GB failed: %s", mem_gb, exc)

    def report_checkpoint(self, step: int, path: str, error: str = "") -> bool:
        """Report a written checkpoint (or, with `error`, a failed write); True once the daemon has it."""
        e = self.env
        r = self.call("ReportCheckpoint", job_pb2.ReportCheckpointRequest(
            job_id=e.job_id, attempt=e.attempt, step=step, path=path, error=error[:500]),
            give_up_after_s=self.report_patience_s)
        return r is not None

    def report_completion(self, ok: bool, step: int, message: str = "", patience_s: float | None = None) -> None:
        e = self.env
        outcome = job_pb2.COMPLETION_OUTCOME_SUCCEEDED if ok else job_pb2.COMPLETION_OUTCOME_FAILED
        self.call("ReportCompletion", job_pb2.ReportCompletionRequest(
            job_id=e.job_id, attempt=e.attempt, outcome=outcome, step=step, message=message[:500]),
            give_up_after_s=self.report_patience_s if patience_s is None else patience_s)


def answer_every_for(interval_s: float) -> int:
    """How often a stream renewing every `interval_s` asks for an answer: once per
    `ANSWER_WITHIN_S` of renewals (every message from a 10 s interval up), at most every
    `MAX_ANSWER_EVERY`-th. A half-open connection then shows within that time plus
    `RPC_TIMEOUT_S`; renewals at a 1 s cadence get a tenth as many answers."""
    return max(1, min(MAX_ANSWER_EVERY, int(ANSWER_WITHIN_S / max(interval_s, 1e-3))))


def _refused(name: str, exc: grpc.RpcError) -> None:
    log.warning("%s refused: %s %s", name, exc.code().name, exc.details())


def _point(cpus: float) -> dict[str, float]:
    """The RenewLeaseRequest fields asking for a profiling point of `cpus` (0 = none)."""
    return {"profile_sub_cpus": cpus} if 0 < cpus < 1 else {"profile_cpus": int(cpus)}


def _pause_rpcs_across_forks(keeper: LeaseKeeper) -> None:
    """Fork hooks for `keeper`, through a weak reference: a process that makes many keepers
    (tests, benchmarks) registers many hooks, and those of keepers gone do nothing. The child
    stays `_forking`: it never uses its parent's lease."""
    ref = weakref.ref(keeper)

    def before() -> None:
        k = ref()
        if k is not None and not k._closed.is_set():
            k.before_fork()

    def after_in_parent() -> None:
        k = ref()
        if k is not None:
            k.after_fork_in_parent()

    os.register_at_fork(before=before, after_in_parent=after_in_parent)
