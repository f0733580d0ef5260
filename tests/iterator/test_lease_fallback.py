"""The lease keeper against a JobService without RenewLeaseStream (a daemon from before issue
17): the stream is refused UNIMPLEMENTED once, and every renewal goes by RenewLease."""

from __future__ import annotations

import time
from concurrent import futures

import grpc

from synergy.common.contract import JobEnv
from synergy.iterator.lease import LeaseKeeper, answer_every_for
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


def _keeper_against(service: OlderJobService) -> tuple[grpc.Server, LeaseKeeper]:
    """A lease keeper (not started) for job 1 against `service` on a server of its own."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    job_pb2_grpc.add_JobServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    keeper = LeaseKeeper(JobEnv(job_id=1, attempt=1, rank=0, world_size=1, daemon_address=f"127.0.0.1:{port}",
                                job_token="t" * 16), samples_per_step=1)
    return server, keeper


def test_a_daemon_without_the_stream_gets_renew_lease_calls() -> None:
    service = OlderJobService()
    server, keeper = _keeper_against(service)
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


class SilentJobService(OlderJobService):
    """A RenewLeaseStream that answers the first message and then goes silent (a daemon
    behind a half-open connection) or, with `break_after`, ends the stream after that many
    more messages (a daemon restart)."""

    def __init__(self, break_after: int = 0, interval_s: float = 0.02) -> None:
        super().__init__()
        self.break_after, self.interval_s = break_after, interval_s
        self.streamed_steps: list[int] = []
        self.unary_steps: list[int] = []

    def RenewLease(self, request, context):  # noqa: N802
        self.unary_steps.append(request.step)
        return super().RenewLease(request, context)

    def RenewLeaseStream(self, requests, context):  # noqa: N802
        for i, request in enumerate(requests):
            self.streamed_steps.append(request.step)
            if i == 0:
                yield job_pb2.RenewLeaseStreamResponse(reply=job_pb2.RenewLeaseResponse(
                    action=job_pb2.LEASE_ACTION_CONTINUE, renew_interval_s=self.interval_s))
            elif self.break_after and i == self.break_after:
                context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")


def test_a_stream_silent_past_its_promise_is_taken_for_broken(monkeypatch) -> None:
    """The daemon answers at least every `answer_every`-th message: a stream silent for
    longer is dropped, that renewal goes by RenewLease, and a new stream is opened."""
    monkeypatch.setattr("synergy.iterator.lease.RPC_TIMEOUT_S", 0.3)
    service = SilentJobService()
    server, keeper = _keeper_against(service)
    keeper.step = 7
    keeper.start()
    try:
        deadline = time.monotonic() + 20
        while (not service.unary_steps or keeper.streams_opened < 2) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert service.unary_steps and keeper.streams_opened >= 2 and keeper.streamed
        assert len(service.streamed_steps) > answer_every_for(keeper.interval_s)  # silent past the promise
    finally:
        keeper.close()
        server.stop(0)


def test_a_broken_quiet_stream_sends_its_unanswered_renewal_by_call() -> None:
    """A stream that breaks after messages left unanswered: the last of them goes again by
    RenewLease at once (as a renewal that met a broken stream always did)."""
    service = SilentJobService(break_after=2, interval_s=0.2)  # the break is seen before the next renewal
    server, keeper = _keeper_against(service)
    keeper.start()
    try:
        deadline = time.monotonic() + 20
        while not service.unary_steps and time.monotonic() < deadline:
            keeper.step += 1
            time.sleep(0.005)
        assert service.unary_steps, "no RenewLease after the stream broke"
        # The renewal sent by call is the stream's last unanswered message (message 1; 2 broke it).
        assert service.unary_steps[0] in service.streamed_steps[1:3], (service.unary_steps, service.streamed_steps)
    finally:
        keeper.close()
        server.stop(0)


def test_a_stream_asks_for_an_answer_once_per_ten_seconds_of_renewals() -> None:
    """At the stress cadence a tenth of the answers; from a 10 s interval up (the production
    cadence renews every 30 s) every one, so a half-open connection shows as soon as before."""
    assert [answer_every_for(s) for s in (0.1, 1.0, 3.0, 5.0, 10.0, 30.0)] == [10, 10, 3, 2, 1, 1]
