"""Defect: a duplicate node id was not detected.

A second `RegisterNode("dup")` from another host while the first agent was alive replaced
its capacity and hostname, and its empty heartbeat was answered with LAUNCH for a task
the first agent already ran: the job ran twice. Now a live node id registered by another
agent instance is refused (ALREADY_EXISTS) until that instance times out; heartbeats of a
superseded instance get FAILED_PRECONDITION ("superseded ..."); the instance id is
persisted, so a restarted daemon keeps the protection.
"""

from __future__ import annotations

import grpc
import pytest

from synergyd_harness import RPC_TIMEOUT, channel, md, wait_for

from synergy.v1 import admin_pb2, common_pb2, node_pb2, node_pb2_grpc


def _node_stub(d):
    return node_pb2_grpc.NodeServiceStub(channel(d.address)), md(d.cluster_token)


def _register(d, instance_id: str, gpus: int = 8):
    stub, auth = _node_stub(d)
    return stub.RegisterNode(
        node_pb2.RegisterNodeRequest(
            node_id="dup", hostname="other-host", capacity=common_pb2.Resources(gpus=gpus, cpus=48, mem_gb=512),
            agent_version="impostor", instance_id=instance_id,
        ),
        metadata=auth,
        timeout=RPC_TIMEOUT,
    )


def _heartbeat(d, instance_id: str):
    stub, auth = _node_stub(d)
    return stub.Heartbeat(
        node_pb2.HeartbeatRequest(node_id="dup", instance_id=instance_id), metadata=auth, timeout=RPC_TIMEOUT
    )


def _node(admin) -> admin_pb2.NodeInfo:
    (node,) = [n for n in admin.ListNodes(admin_pb2.ListNodesRequest()).nodes if n.node_id == "dup"]
    return node


def test_a_live_node_id_is_not_taken_over_and_nothing_runs_twice(start_daemon, start_agent) -> None:
    d = start_daemon()
    admin = d.admin()
    first = start_agent(d, "dup", gpus=4)
    job = admin.submit("once", gpus=2)
    wait_for(lambda: first.running(), what="the job running on the first agent")

    with pytest.raises(grpc.RpcError) as refused:
        _register(d, "second-instance")
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "'dup'" in refused.value.details() and "alive" in refused.value.details()
    node = _node(admin)
    assert (node.hostname, node.capacity.gpus) == ("dup", 4)  # nothing of the impostor was kept

    with pytest.raises(grpc.RpcError) as superseded:  # its empty task list must not earn a LAUNCH
        _heartbeat(d, "second-instance")
    assert superseded.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert superseded.value.details().startswith("superseded")

    # The live instance itself may register again (an agent retrying its first call).
    again = _register(d, first.instance_id, gpus=4)
    assert again.state == common_pb2.NODE_STATE_READY
    assert first.launches == [(job.id, 1, 0)] and admin.state(job.id) == "running"
    assert not first.superseded.is_set()


def test_a_timed_out_instance_is_superseded_and_the_protection_survives_a_restart(
    start_daemon, start_agent, tmp_path
) -> None:
    d = start_daemon(state_dir=tmp_path / "state")
    admin = d.admin()
    old = start_agent(d, "dup", gpus=4)
    job = admin.submit("moves", gpus=2)
    wait_for(lambda: old.running(), what="the job running on the old agent")

    old.paused.set()  # silent: once it misses heartbeats for the node timeout, it may be replaced
    wait_for(lambda: _try_register(d, "new-instance"), timeout=60, what="the new instance to be accepted")
    assert _node(admin).hostname == "other-host"
    old.paused.clear()
    wait_for(lambda: old.superseded.is_set(), what="the old instance to be told it is superseded")
    assert not old.running()
    wait_for(lambda: admin.state(job.id) != "running" or admin.describe(job.id).attempt > 1,
             what="the old instance's job to be requeued")

    # After kill -9 and a restart, the persisted instance still owns the node for a timeout.
    d.kill()
    d2 = start_daemon(state_dir=tmp_path / "state")
    with pytest.raises(grpc.RpcError) as refused:
        _register(d2, "third-instance")
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    _register(d2, "new-instance")  # the owner itself is welcome back


def _try_register(d, instance_id: str) -> bool:
    try:
        _register(d, instance_id)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.ALREADY_EXISTS:
            raise
        return False
    return True


def test_legacy_agents_without_instance_id_still_work(start_daemon, start_agent) -> None:
    d = start_daemon()
    admin = d.admin()
    legacy = start_agent(d, "dup", gpus=2, instance_id="")
    admin.submit("old-style", gpus=1)
    wait_for(lambda: legacy.running(), what="a legacy agent to run a job")
    assert not legacy.superseded.is_set()
