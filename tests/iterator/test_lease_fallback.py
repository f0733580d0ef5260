"""The lease keeper against a JobService without RenewLeaseStream (a daemon from before issue
17): the stream is refused UNIMPLEMENTED once, and every renewal goes by RenewLease."""

from __future__ import annotations

import time
from concurrent import futures

import grpc

from synergy.common.contract import JobEnv
from synergy.iterator.lease import LeaseKeeper
from synergy.v1 import job_pb2, job_pb2_grpc


class OlderJobService(job_pb2_grpc.JobServiceServicer):
    """RegisterJobProcess and RenewLease only (the base class answers the rest UNIMPLEMENTED)."""

    def __init__(self) -> None:
        self.renewals = 0

    def RegisterJobProcess(self, request, context):  # noqa: N802
        return job_pb2.RegisterJobProcessResponse(renew_interval_s=0.02)

    def RenewLease(self, request, context):  # noqa: N802
        self.renewals += 1
        return job_pb2.RenewLeaseResponse(action=job_pb2.LEASE_ACTION_CONTINUE, renew_interval_s=0.02)


def test_a_daemon_without_the_stream_gets_renew_lease_calls() -> None:
    service = OlderJobService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    job_pb2_grpc.add_JobServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    keeper = LeaseKeeper(JobEnv(job_id=1, attempt=1, rank=0, world_size=1, daemon_address=f"127.0.0.1:{port}",
                                job_token="t" * 16), samples_per_step=1)
    keeper.start()
    try:
        deadline = time.monotonic() + 20
        while keeper.renewals < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert keeper.renewals >= 5 and service.renewals == keeper.renewals
        assert not keeper.streamed and keeper.streams_opened == 1  # tried once, then unary only
    finally:
        keeper.close()
        server.stop(0)
