"""A small stand-in training job that reports its throughput through the JobService.

It reads the environment contract the agent sets (`synergy.common.contract.JobEnv`),
registers with synergyd, and renews its lease every `renew_interval_s` with its step and
samples per second, like an iterator-driven job (issue 8's SynergyIterator replaces it).
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
    step = reg.resume_step
    src = np.ones(args.mb * 1024 * 1024 // 8)
    dst = np.empty_like(src)
    window_start, window_steps, next_renew, rate, stop_at = time.monotonic(), 0, 0.0, 0.0, 0
    window_cpu = time.thread_time()
    while not stop["signal"]:
        np.copyto(dst, src)  # the "data loader"
        dst[:: 4096] *= 1.0001  # the "model"
        step += 1
        window_steps += 1
        now = time.monotonic()
        if now - window_start >= 1.0:
            rate = window_steps * BATCH / (now - window_start)
            cpu = time.thread_time()
            print(f"TPUT {time.time():.3f} {rate:.1f} {window_steps * BATCH / max(cpu - window_cpu, 1e-6):.1f}",
                  flush=True)
            window_start, window_steps, window_cpu = now, 0, cpu
        if args.steps and step >= args.steps:
            stub.ReportCompletion(job_pb2.ReportCompletionRequest(
                job_id=env.job_id, attempt=env.attempt, step=step,
                outcome=job_pb2.COMPLETION_OUTCOME_SUCCEEDED), metadata=md, timeout=10)
            return 0
        if stop_at and step >= stop_at:  # nothing to save: the stand-in has no state
            stub.ReportCheckpoint(job_pb2.ReportCheckpointRequest(
                job_id=env.job_id, attempt=env.attempt, step=step,
                path=os.path.join(env.checkpoint_dir or ".", f"step-{step}")), metadata=md, timeout=10)
            return 75
        if now >= next_renew and rate > 0:
            r = stub.RenewLease(job_pb2.RenewLeaseRequest(
                job_id=env.job_id, attempt=env.attempt, rank=env.rank, step=step,
                samples_per_s=rate, steps_per_s=rate / BATCH), metadata=md, timeout=10)
            interval = r.renew_interval_s or interval
            next_renew = now + interval
            if r.action == job_pb2.LEASE_ACTION_TERMINATE:
                return 1
            if r.action == job_pb2.LEASE_ACTION_STOP:
                stop_at = max(r.stop_at_step, step)
    return 75


if __name__ == "__main__":
    sys.exit(main())
