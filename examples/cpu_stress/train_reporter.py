"""A small stand-in training job that reports its throughput through the JobService.

It reads the environment contract the agent sets (`synergy.common.contract.JobEnv`),
registers with synergyd, and renews its lease every `renew_interval_s` with its step and
samples per second from a thread of its own, like an iterator-driven job (issue 8's
SynergyIterator replaces it; its lease thread does the same): a renewal waiting on a busy
daemon does not stall the training loop.
One "step" is memory-bound on purpose: it copies a batch buffer (the data loader's work)
and does a little arithmetic, so memory-bandwidth contention from a neighbour slows it
down. It prints `TPUT <unix time> <samples/s> <samples per CPU-second>` about every second:
the first is what the job gets (it is what the lease renewals report), the second divides by
the CPU time its loop had, so it moves with memory contention but not with time lost to other
processes on its core (a benchmark on a shared machine can tell the two apart). It honours
STOP (checkpoint report, exit 75) and TERMINATE, exits 75 on SIGTERM, and ends after --steps
(0 = never).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np

from synergy.common.contract import JobEnv
from synergy.v1 import job_pb2, job_pb2_grpc

BATCH = 32


def _channel(env: JobEnv) -> grpc.Channel:
    if env.tls_ca:
        return grpc.secure_channel(env.daemon_address, grpc.ssl_channel_credentials(Path(env.tls_ca).read_bytes()))
    return grpc.insecure_channel(env.daemon_address)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=32, help="batch buffer, MiB, copied once per step")
    p.add_argument("--steps", type=int, default=0, help="finish after this many steps (0 = run until stopped)")
    args = p.parse_args()
    env = JobEnv.from_env()
    print("PID", os.getpid(), flush=True)
    stop = {"signal": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(signal=True))
    stub = job_pb2_grpc.JobServiceStub(_channel(env))
    md = (("authorization", f"Bearer {env.job_token}"),)
    reg = stub.RegisterJobProcess(job_pb2.RegisterJobProcessRequest(
        job_id=env.job_id, attempt=env.attempt, rank=env.rank, world_size=env.world_size,
        node_id=env.node_id, hostname=socket.gethostname(), pid=os.getpid()), metadata=md, timeout=10)
    interval = reg.renew_interval_s or 1.0
    src = np.ones(args.mb * 1024 * 1024 // 8)
    dst = np.empty_like(src)
    #: shared with the lease thread: progress out, the daemon's action in
    state = {"step": reg.resume_step, "rate": 0.0, "stop_at": 0, "terminate": False}
    done = threading.Event()

    def renew() -> None:
        nonlocal interval
        while not done.wait(interval):
            if state["rate"] <= 0:
                continue
            try:
                r = stub.RenewLease(job_pb2.RenewLeaseRequest(
                    job_id=env.job_id, attempt=env.attempt, rank=env.rank, step=state["step"],
                    samples_per_s=state["rate"], steps_per_s=state["rate"] / BATCH), metadata=md, timeout=10)
            except grpc.RpcError as exc:  # the next renewal tries again, as the iterator's lease thread does
                print(f"renewal failed: {exc.code()}", file=sys.stderr, flush=True)
                continue
            interval = r.renew_interval_s or interval
            if r.action == job_pb2.LEASE_ACTION_TERMINATE:
                state["terminate"] = True
            elif r.action == job_pb2.LEASE_ACTION_STOP:
                state["stop_at"] = max(r.stop_at_step, state["step"])

    threading.Thread(target=renew, daemon=True, name="lease").start()
    step = reg.resume_step
    window_start, window_steps = time.monotonic(), 0
    window_cpu = time.thread_time()
    while not stop["signal"]:
        np.copyto(dst, src)  # the "data loader"
        dst[:: 4096] *= 1.0001  # the "model"
        step += 1
        window_steps += 1
        state["step"] = step
        now = time.monotonic()
        if now - window_start >= 1.0:
            rate = window_steps * BATCH / (now - window_start)
            cpu = time.thread_time()
            print(f"TPUT {time.time():.3f} {rate:.1f} {window_steps * BATCH / max(cpu - window_cpu, 1e-6):.1f}",
                  flush=True)
            window_start, window_steps, window_cpu = now, 0, cpu
            state["rate"] = rate
        if state["terminate"]:
            done.set()
            return 1
        if args.steps and step >= args.steps:
            done.set()
            stub.ReportCompletion(job_pb2.ReportCompletionRequest(
                job_id=env.job_id, attempt=env.attempt, step=step,
                outcome=job_pb2.COMPLETION_OUTCOME_SUCCEEDED), metadata=md, timeout=10)
            return 0
        if state["stop_at"] and step >= state["stop_at"]:  # nothing to save: the stand-in has no state
            done.set()
            stub.ReportCheckpoint(job_pb2.ReportCheckpointRequest(
                job_id=env.job_id, attempt=env.attempt, step=step,
                path=os.path.join(env.checkpoint_dir or ".", f"step-{step}")), metadata=md, timeout=10)
            return 75
    done.set()
    return 75


if __name__ == "__main__":
    sys.exit(main())
