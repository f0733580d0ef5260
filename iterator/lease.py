"""The background half of the iterator: register, renew the lease, report progress.

The training thread and this thread share plain attributes only: the training thread writes
`step` (an int) and reads `stop_at` / `terminate`; this thread writes those and reads `step`.
Single attribute reads and writes are atomic in CPython, so the per-batch path takes no lock
and does no I/O. While the daemon is unreachable the thread retries with jittered back-off and
training goes on under the current lease (the daemon, not the job, decides when it is lost).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

import grpc

from synergy.agent.client import Backoff, open_channel
from synergy.agent.contract import JobEnv
from synergy.v1 import job_pb2, job_pb2_grpc

log = logging.getLogger("synergy.iterator")

RPC_TIMEOUT_S = 5.0
_RETRY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class LeaseKeeper:
    """Owns the JobService channel and the renewal thread of one job process."""

    def __init__(self, env: JobEnv, samples_per_step: int) -> None:
        self.env = env
        self.samples_per_step = samples_per_step
        self.channel = open_channel(env.daemon_address, env.tls_ca)
        self.stub = job_pb2_grpc.JobServiceStub(self.channel)
        self.md = [("authorization", f"Bearer {env.job_token}")]
        #: Job-wide completed steps; written by the training thread only.
        self.step = env.resume_step
        #: 0 = keep going; otherwise the last step to run before checkpointing (this thread writes).
        self.stop_at = 0
        self.stop_reason = ""
        self.terminate = False
        #: Monotonic time the STOP reply arrived (for the STOP → exit 75 figure).
        self.stop_received_s = 0.0
        self.interval_s = 1.0
        #: How long the final reports (checkpoint, completion) wait for a daemon that is down.
        self.report_patience_s = 60.0
        self.renewals = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="synergy-lease")

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(timeout=RPC_TIMEOUT_S + 1)
        self.channel.close()

    # -- calls -------------------------------------------------------------------------------------
    def call(self, name: str, request: Any, give_up_after_s: float = float("inf")) -> Any:
        """One RPC, retried with back-off while the daemon is down; None when closed or gave up."""
        backoff = Backoff(initial_s=0.1, max_s=2.0)
        deadline = time.monotonic() + give_up_after_s
        while not self._closed.is_set():
            try:
                return getattr(self.stub, name)(request, metadata=self.md, timeout=RPC_TIMEOUT_S)
            except grpc.RpcError as exc:
                if exc.code() not in _RETRY:
                    log.warning("%s refused: %s %s", name, exc.code().name, exc.details())
                    return None
                if time.monotonic() >= deadline:
                    return None
                self._closed.wait(backoff.next())
        return None

    def _run(self) -> None:
        e = self.env
        reg = self.call("RegisterJobProcess", job_pb2.RegisterJobProcessRequest(
            job_id=e.job_id, attempt=e.attempt, rank=e.rank, world_size=e.world_size,
            node_id=e.node_id, hostname=socket.gethostname(), pid=os.getpid()))
        if reg is None:
            return
        self.interval_s = reg.renew_interval_s or self.interval_s
        last_t, last_step = time.monotonic(), self.step
        while not self._closed.wait(self.interval_s):
            now, step = time.monotonic(), self.step
            steps_per_s = (step - last_step) / max(now - last_t, 1e-6)
            last_t, last_step = now, step
            r = self.call("RenewLease", job_pb2.RenewLeaseRequest(
                job_id=e.job_id, attempt=e.attempt, rank=e.rank, step=step,
                samples_per_s=steps_per_s * self.samples_per_step, steps_per_s=steps_per_s))
            if r is None:
                continue
            self.renewals += 1
            self.interval_s = r.renew_interval_s or self.interval_s
            if r.action == job_pb2.LEASE_ACTION_STOP and not self.stop_at:
                self.stop_reason = r.reason
                self.stop_received_s = time.monotonic()
                self.stop_at = max(int(r.stop_at_step), self.step, 1)
                log.info("lease not renewed (%s): stopping after step %d", r.reason, self.stop_at)
            elif r.action == job_pb2.LEASE_ACTION_TERMINATE:
                self.stop_reason = r.reason
                self.terminate = True
                log.info("told to terminate: %s", r.reason)
                return

    def report_checkpoint(self, step: int, path: str) -> None:
        e = self.env
        self.call("ReportCheckpoint", job_pb2.ReportCheckpointRequest(
            job_id=e.job_id, attempt=e.attempt, step=step, path=path), give_up_after_s=self.report_patience_s)

    def report_completion(self, ok: bool, step: int, message: str = "", patience_s: float | None = None) -> None:
        e = self.env
        outcome = job_pb2.COMPLETION_OUTCOME_SUCCEEDED if ok else job_pb2.COMPLETION_OUTCOME_FAILED
        self.call("ReportCompletion", job_pb2.ReportCompletionRequest(
            job_id=e.job_id, attempt=e.attempt, outcome=outcome, step=step, message=message[:500]),
            give_up_after_s=self.report_patience_s if patience_s is None else patience_s)


