"""RenewLeaseStream against a live synergyd: renewals as messages on one open stream (issue 17,
a cheaper daemon per RPC), with RenewLease's auth, validation and codes, and a job's lease
keeper that survives a daemon restart."""

from __future__ import annotations

import logging
import math
import threading
from typing import Callable, Iterator

import grpc
import pytest

from synergyd_harness import Admin, DaemonProcess, channel, free_port, md, wait_for
from synergy.common.channel import MessageStream, StreamBroken, StreamRefused, stream_answer
from synergy.common.contract import JobEnv
from synergy.iterator.lease import LeaseKeeper
from synergy.v1 import admin_pb2, common_pb2, job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc

STREAM = "/synergy.v1.JobService/RenewLeaseStream"


class Node:
    """A node heartbeating by hand: its tasks run from the launch on (no processes)."""

    def __init__(self, address: str, cluster_token: str, node_id: str, gpus: int) -> None:
        self.ch = channel(address)
        self.stub = node_pb2_grpc.NodeServiceStub(self.ch)
        self.md, self.node_id, self.gpus = md(cluster_token), node_id, gpus
        self.launched: dict[int, node_pb2.TaskSpec] = {}
        self.register()

    def register(self) -> None:
        self.stub.RegisterNode(node_pb2.RegisterNodeRequest(
            node_id=self.node_id, capacity=common_pb2.Resources(gpus=self.gpus, cpus=8, mem_gb=64),
            tasks=self.statuses(), instance_id="test-node"), metadata=self.md, timeout=5)

    def statuses(self) -> list[node_pb2.TaskStatus]:
        return [node_pb2.TaskStatus(ref=t.ref, state=node_pb2.TASK_STATE_RUNNING, placement=t.placement)
                for t in self.launched.values()]

    def heartbeat(self) -> None:
        r = self.stub.Heartbeat(node_pb2.HeartbeatRequest(node_id=self.node_id, tasks=self.statuses(),
                                                          instance_id="test-node"), metadata=self.md, timeout=5)
        for ins in r.instructions:
            if ins.kind == node_pb2.INSTRUCTION_KIND_LAUNCH:
                self.launched[ins.ref.job_id] = ins.task

    def keep_beating(self, stop: threading.Event) -> None:
        """Heartbeat every 0.2 s until `stop`, through daemon restarts (re-registering)."""
        while not stop.wait(0.2):
            try:
                self.heartbeat()
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    self.register()


def launch(daemon: DaemonProcess, admin: Admin, node_id: str, names: list[str]) -> tuple[Node, list[node_pb2.TaskSpec]]:
    """Submit `names` (1 GPU each) and heartbeat as `node_id` until each is launched there."""
    node = Node(daemon.address, daemon.cluster_token, node_id, len(names))
    ids = [admin.submit(name, gpus=1).id for name in names]

    def all_launched() -> bool:
        node.heartbeat()
        return set(ids) <= set(node.launched)

    wait_for(all_launched, what=f"{names} to be launched")
    node.heartbeat()  # report them running
    return node, [node.launched[i] for i in ids]


def beat(node: Node) -> Callable[[], None]:
    """Keep `node` heartbeating on a thread of its own; returns what stops it (and waits)."""
    end = threading.Event()
    beating = threading.Thread(target=node.keep_beating, args=(end,), daemon=True)
    beating.start()

    def stop() -> None:
        end.set()
        beating.join()

    return stop


def keeper_for(address: str, task: node_pb2.TaskSpec) -> LeaseKeeper:
    """The job side of `task`: a lease keeper (not started), as the wrap makes one."""
    r = task.ref
    return LeaseKeeper(JobEnv(job_id=r.job_id, attempt=r.attempt, rank=r.rank, world_size=1,
                              daemon_address=address, job_token=task.job_token), samples_per_step=1)


def renewal(task: node_pb2.TaskSpec, step: int, **fields: float) -> job_pb2.RenewLeaseRequest:
    r = task.ref
    return job_pb2.RenewLeaseRequest(job_id=r.job_id, attempt=r.attempt, rank=r.rank, step=step, **fields)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path_factory.mktemp("stream") / "state", round_s=5)
    d.start()
    yield d
    d.kill()


@pytest.fixture(scope="module")
def admin(daemon: DaemonProcess) -> Iterator[Admin]:
    a = daemon.admin()
    yield a
    a.close()


@pytest.fixture(scope="module")
def tasks(daemon: DaemonProcess, admin: Admin) -> list[node_pb2.TaskSpec]:
    return launch(daemon, admin, "stream-node", ["streamed-a", "streamed-b"])[1]


@pytest.fixture
def stub(daemon: DaemonProcess) -> Iterator[job_pb2_grpc.JobServiceStub]:
    ch = channel(daemon.address)
    yield job_pb2_grpc.JobServiceStub(ch)
    ch.close()


def test_renewals_on_one_stream_renew_the_lease_in_order(stub, admin: Admin, tasks) -> None:
    mine = tasks[0]
    stream = MessageStream(stub.RenewLeaseStream, md(mine.job_token))
    try:
        replies = [stream_answer(stream.exchange(renewal(mine, step))) for step in (5, 6, 7)]
    finally:
        stream.close()
    assert [r.action for r in replies] == [job_pb2.LEASE_ACTION_CONTINUE] * 3
    assert all(r.lease.job_id == mine.ref.job_id and r.renew_interval_s > 0 for r in replies)
    expiries = [r.lease.expires_at_unix_s for r in replies]
    assert expiries == sorted(expiries) and expiries[0] > 0
    wait_for(lambda: admin.describe(mine.ref.job_id).steps_done == 7, what="the streamed step to reach describe")


def test_another_jobs_id_is_refused_as_by_renew_lease_and_the_stream_goes_on(stub, tasks) -> None:
    mine, other = tasks
    with pytest.raises(grpc.RpcError) as unary:
        stub.RenewLease(renewal(other, 1), metadata=md(mine.job_token), timeout=5)
    stream = MessageStream(stub.RenewLeaseStream, md(mine.job_token))
    try:
        with pytest.raises(StreamRefused) as streamed:
            stream_answer(stream.exchange(renewal(other, 1)))
        assert stream_answer(stream.exchange(renewal(mine, 8))).action == job_pb2.LEASE_ACTION_CONTINUE
    finally:
        stream.close()
    assert streamed.value.code() == unary.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert streamed.value.details() == unary.value.details()


@pytest.mark.parametrize("token", ["", "not-a-token-" + "x" * 20])
def test_a_stream_without_a_valid_job_token_ends_as_renew_lease_is_refused(stub, tasks, token: str) -> None:
    metadata = md(token) if token else []
    with pytest.raises(grpc.RpcError) as unary:
        stub.RenewLease(renewal(tasks[0], 1), metadata=metadata, timeout=5)
    stream = MessageStream(stub.RenewLeaseStream, metadata)
    with pytest.raises(StreamBroken) as broken:
        stream.exchange(renewal(tasks[0], 1))
    assert broken.value.code == unary.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_an_invalid_message_is_answered_invalid_argument_naming_the_field(stub, daemon, tasks) -> None:
    mine = tasks[0]
    stream = MessageStream(stub.RenewLeaseStream, md(mine.job_token))
    try:
        for bad, field in (({"steps_per_s": math.nan}, "steps_per_s"), ({"samples_per_s": -1.0}, "samples_per_s"),
                           ({"profile_sub_cpus": math.inf}, "profile_sub_cpus")):
            with pytest.raises(StreamRefused) as refused:
                stream_answer(stream.exchange(renewal(mine, 9, **bad)))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in refused.value.details()
        assert stream_answer(stream.exchange(renewal(mine, 10))).action == job_pb2.LEASE_ACTION_CONTINUE
    finally:
        stream.close()
    assert daemon.alive


def test_undecodable_bytes_end_the_stream_with_invalid_argument(daemon, tasks) -> None:
    ch = channel(daemon.address)
    raw = ch.stream_stream(STREAM)  # bytes in, bytes out
    stream = MessageStream(raw, md(tasks[0].job_token))
    try:
        with pytest.raises(StreamBroken) as broken:
            stream.exchange(b"\xff\xff\xff\xff")
        assert broken.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "RenewLeaseRequest" in str(broken.value)
        # The daemon lives on: a new stream renews.
        stream = MessageStream(job_pb2_grpc.JobServiceStub(ch).RenewLeaseStream, md(tasks[0].job_token))
        assert stream_answer(stream.exchange(renewal(tasks[0], 11))).action == job_pb2.LEASE_ACTION_CONTINUE
    finally:
        stream.close()
        ch.close()
    assert daemon.alive


@pytest.mark.parametrize("stop", ["sigterm", "kill -9"])
def test_the_lease_keeper_renews_on_a_stream_and_resumes_it_after_a_daemon_restart(start_daemon, tmp_path,
                                                                                   stop: str, caplog) -> None:
    caplog.set_level(logging.INFO, logger="synergy.iterator")
    port, state = str(free_port()), tmp_path / "state"
    d1 = start_daemon("--port", port, state_dir=state, round_s=1)
    admin = d1.admin()
    node, (task,) = launch(d1, admin, "keeper-node", ["kept"])
    admin.close()
    stop_beating = beat(node)
    keeper = keeper_for(d1.address, task)
    keeper.start()
    try:
        wait_for(lambda: keeper.renewals >= 3, what="renewals on the stream")
        assert keeper.streamed and keeper.streams_opened == 1  # every renewal on the one stream
        if stop == "sigterm":
            # Graceful: the daemon ends the open stream at once (else its grace period waits for
            # it, and the node's heartbeats are refused meanwhile).
            assert d1.terminate() == 0
            wait_for(lambda: "synergyd is stopping" in caplog.text, what="the stream ended by the daemon")
        else:
            d1.kill()
        before = keeper.renewals
        d2 = start_daemon("--port", port, state_dir=state, round_s=1)
        wait_for(lambda: keeper.renewals >= before + 3 and keeper.streams_opened >= 2, timeout=30,
                 what="renewals on a new stream after the restart")
        assert keeper.streamed and not keeper.stop_at and not keeper.terminate
        assert d2.alive
    finally:
        keeper.close()
        stop_beating()


def test_streams_beyond_the_limit_are_refused_and_the_job_renews_by_calls(start_daemon) -> None:
    """Each running rank holds its stream open, one concurrent call each: gRPC's limit on
    concurrent calls (8,192 before) refused every heartbeat once 8,192 ranks streamed
    (daemon_load.py at 10,000 jobs: nodes lost, jobs requeued). Streams are capped by
    --max-renewal-streams, below gRPC's limit: the one beyond is refused RESOURCE_EXHAUSTED
    (the wrap then renews by RenewLease), heartbeats go on, and a closed stream frees its place."""
    d = start_daemon("--max-renewal-streams", "1", round_s=1)
    admin = d.admin()
    ch = channel(d.address)
    try:
        node, (a, b) = launch(d, admin, "capped-node", ["capped-a", "capped-b"])
        stub = job_pb2_grpc.JobServiceStub(ch)
        first = MessageStream(stub.RenewLeaseStream, md(a.job_token))
        assert stream_answer(first.exchange(renewal(a, 1))).action == job_pb2.LEASE_ACTION_CONTINUE
        second = MessageStream(stub.RenewLeaseStream, md(b.job_token))
        with pytest.raises(StreamBroken) as refused:
            second.exchange(renewal(b, 1))
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-renewal-streams" in str(refused.value)
        unary = stub.RenewLease(renewal(b, 2), metadata=md(b.job_token), timeout=5)
        assert unary.action == job_pb2.LEASE_ACTION_CONTINUE
        node.heartbeat()
        # The job's wrap: one refused stream, then calls (not a refused stream per renewal).
        keeper = LeaseKeeper(JobEnv(job_id=b.ref.job_id, attempt=b.ref.attempt, rank=0, world_size=1,
                                    daemon_address=d.address, job_token=b.job_token), samples_per_step=1)
        for _ in range(4):
            assert keeper.renew(renewal(b, 4)).action == job_pb2.LEASE_ACTION_CONTINUE
        assert keeper.streams_opened == 1 and keeper.streamed
        keeper.close()
        first.close()

        def second_streams() -> bool:
            s = MessageStream(stub.RenewLeaseStream, md(b.job_token))
            try:
                return stream_answer(s.exchange(renewal(b, 3))).action == job_pb2.LEASE_ACTION_CONTINUE
            except StreamBroken:
                return False
            finally:
                s.close()

        wait_for(second_streams, what="the closed stream's place to be free")
    finally:
        ch.close()
        admin.close()


def test_the_stream_limit_is_checked_at_start(start_daemon) -> None:
    with pytest.raises(AssertionError, match="--max-renewal-streams must be from 1 to 1000000, got 0"):
        start_daemon("--max-renewal-streams", "0")


def test_a_quiet_stream_is_answered_every_nth_message_and_at_once_on_a_change(start_daemon) -> None:
    """`answer_every`: a stream's first message is answered; after it, at least every third,
    and the ones between only when their answer changes (a drained node's STOP comes in
    answer to the very next message). A value above the limit is refused by name and the
    stream goes on."""
    from synergy.scheduler.daemon.validation import MAX_ANSWER_EVERY

    daemon = start_daemon(round_s=5)  # its own: the module's daemon has requeued jobs ahead in FIFO
    admin = daemon.admin()
    node, (task,) = launch(daemon, admin, "quiet-node", ["quiet"])
    stop_beating = beat(node)
    ch = channel(daemon.address)
    stream = MessageStream(job_pb2_grpc.JobServiceStub(ch).RenewLeaseStream, md(task.job_token))
    step = 0

    def send(**fields: int) -> job_pb2.RenewLeaseResponse | None:
        """One message; its answer, or None when the daemon left it unanswered."""
        nonlocal step
        step += 1
        stream.send(renewal(task, step, **fields))
        answer = stream.answer(0.5)
        return None if answer is None else stream_answer(answer)

    try:
        answered = [send(answer_every=3) is not None for _ in range(7)]
        assert answered == [True, False, False, True, False, False, True]
        assert [send() is not None for _ in range(2)] == [True, True]  # 0: every message, as RenewLease
        assert send(answer_every=3) is None
        with pytest.raises(StreamRefused, match="^INVALID_ARGUMENT: answer_every: must be at most"):
            send(answer_every=MAX_ANSWER_EVERY + 1)
        assert send(answer_every=3) is None  # the stream goes on
        admin.DrainNode(admin_pb2.DrainNodeRequest(node_id="quiet-node", reason="test"))
        stopped = send(answer_every=3)
        assert stopped is not None and stopped.action == job_pb2.LEASE_ACTION_STOP
        assert send(answer_every=3) is None  # the same STOP again: not repeated
    finally:
        stream.close()
        ch.close()
        stop_beating()
        node.ch.close()
        admin.close()


def test_the_lease_keeper_takes_a_tenth_of_the_answers_and_a_stop_as_it_comes(start_daemon) -> None:
    """The wrap's renewals ask for an answer once per 10 s of renewals (every 10th message
    at this 0.1 s interval, iterator `answer_every_for`): the daemon writes a fraction of the
    answers, and a STOP still reaches the job at once, applied by the thread waiting on the
    stream, not at the next renewal it sends."""
    d = start_daemon(round_s=1)  # renew every 0.1 s
    admin = d.admin()
    node, (task,) = launch(d, admin, "keeper-quiet", ["kept-quiet"])
    stop_beating = beat(node)
    keeper = keeper_for(d.address, task)
    keeper.start()
    try:
        wait_for(lambda: keeper.sent >= 30, what="30 renewals sent")
        sent, answered = keeper.sent, keeper.renewals
        assert sent / 10 - 2 <= answered <= sent / 4, (sent, answered)
        assert keeper.streams_opened == 1 and not keeper.stop_at
        admin.DrainNode(admin_pb2.DrainNodeRequest(node_id="keeper-quiet", reason="test"))
        wait_for(lambda: keeper.stop_at > 0, timeout=5, what="the STOP")
        assert "drain" in keeper.stop_reason
    finally:
        keeper.close()
        stop_beating()
        admin.close()


def test_a_stretched_cadence_reaches_every_rank_at_its_next_renewal_and_every_node_at_its_next_heartbeat(
        start_daemon) -> None:
    """--max-rpc-rate (cadence.py): one rank and one node at 0.5 s ask for 4 calls a second, 8
    times a cap of 0.5, so synergyd tells them 4 s; a second node makes it 6 calls, a stretch
    of 16 and 8 s. A quiet stream hears the new interval in answer to its very next message,
    as it hears any changed answer (fails when a kept answer ignores the interval)."""
    import json

    d = start_daemon("--max-rpc-rate", "0.5", round_s=5)  # unstretched: every 0.5 s

    def stretch() -> float:
        lines = [json.loads(line) for line in d.log_text().splitlines() if '"daemon.cadence"' in line]
        return lines[-1]["stretch"] if lines else 1.0

    admin = d.admin()
    node, (task,) = launch(d, admin, "busy-node", ["stretched"])
    stop_beating = beat(node)
    wait_for(lambda: stretch() == 8.0, timeout=10, what="a stretch of 8")
    ch = channel(d.address)
    stream = MessageStream(job_pb2_grpc.JobServiceStub(ch).RenewLeaseStream, md(task.job_token))
    other = Node(d.address, d.cluster_token, "busy-node-2", 1)
    stop_other = beat(other)
    try:
        stream.send(renewal(task, 1, answer_every=10))
        first = stream_answer(stream.answer(5))
        assert first.renew_interval_s == 4.0
        stream.send(renewal(task, 2, answer_every=10))
        quiet = stream.answer(0.5)
        if stretch() == 8.0:  # the second node not counted yet: nothing changed
            assert quiet is None
        wait_for(lambda: stretch() == 16.0, timeout=10, what="a stretch of 16")
        stream.send(renewal(task, 3, answer_every=10))
        changed = stream.answer(5)
        assert changed is not None and stream_answer(changed).renew_interval_s == 8.0
        beat_reply = node.stub.Heartbeat(node_pb2.HeartbeatRequest(node_id=node.node_id, tasks=node.statuses(),
                                                                   instance_id="test-node"), metadata=node.md,
                                         timeout=5)
        assert beat_reply.heartbeat_interval_s == 8.0
        stream.send(renewal(task, 4, answer_every=10))
        assert stream.answer(0.5) is None  # heard: quiet again
    finally:
        stream.close()
        ch.close()
        stop_other()
        stop_beating()
        node.ch.close()
        other.ch.close()
        admin.close()
