"""Run as a script by test_fork_during_rpc.py: a LeaseKeeper renews against a JobService whose
RenewLease is slow (an RPC is nearly always in flight) while the main thread forks children the
way DataLoader workers start. With `unary` the keeper renews with RenewLease calls; otherwise on
its RenewLeaseStream (a call always open, closed before each fork). Prints "forks ok N" when every child ran and exited; a child
that hangs in gRPC's fork handler makes the parent wait on it past the test's deadline."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from concurrent import futures

import synergy.iterator  # noqa: F401  (sets gRPC's fork settings before grpc loads, as a job does)
import grpc

from synergy.common.contract import JobEnv
from synergy.iterator.lease import LeaseKeeper
from synergy.v1 import job_pb2, job_pb2_grpc


class SlowJobService(job_pb2_grpc.JobServiceServicer):
    def RegisterJobProcess(self, request, context):  # noqa: N802
        return job_pb2.RegisterJobProcessResponse(renew_interval_s=0.001)

    def RenewLease(self, request, context):  # noqa: N802
        time.sleep(0.05)
        return job_pb2.RenewLeaseResponse(renew_interval_s=0.001)

    def RenewLeaseStream(self, requests, context):  # noqa: N802
        for request in requests:
            yield job_pb2.RenewLeaseStreamResponse(reply=self.RenewLease(request, context))


def child() -> None:
    os._exit(0)


def serve() -> int:
    """The slow JobService, in its own process as the daemon is for a job."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    job_pb2_grpc.add_JobServiceServicer_to_server(SlowJobService(), server)
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    server.start()
    sys.stdin.read()  # until the parent closes our stdin
    return 0


def main(forks: int, streamed: bool) -> int:
    server = subprocess.Popen([sys.executable, __file__, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        return _forks(int(server.stdout.readline()), forks, streamed)  # type: ignore[union-attr]
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(timeout=30)


def _forks(port: int, forks: int, streamed: bool) -> int:
    env = JobEnv(job_id=1, attempt=1, rank=0, world_size=1, daemon_address=f"127.0.0.1:{port}", job_token="t" * 16)
    keeper = LeaseKeeper(env, samples_per_step=1, streamed=streamed)
    keeper.start()
    time.sleep(0.3)
    ctx = multiprocessing.get_context("fork")
    for i in range(forks):
        p = ctx.Process(target=child)
        p.start()
        p.join(timeout=20)
        if p.is_alive():
            print(f"fork {i} hung", flush=True)
            p.kill()
            return 1
        time.sleep(0.013)
    renewals, streams = keeper.renewals, keeper.streams_opened
    keeper.close()
    print(f"forks ok {forks}; {renewals} renewals on {streams} streams", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1] == "serve" else main(int(sys.argv[1]), sys.argv[2:] != ["unary"]))
