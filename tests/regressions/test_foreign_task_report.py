"""Defect: any node could end another node's job by reporting its rank as exited.

`thief` heartbeats an EXITED (code 1) report for rank 0 of a job placed on `owner`; the
job used to become FAILED ("rank 0 on node thief exited"). Reports only count from the
node the task was placed on; the others are ignored, logged and counted on /metrics.
"""

from __future__ import annotations

import threading
import urllib.request

from synergyd_harness import RPC_TIMEOUT, channel, md, wait_for

from synergy.v1 import admin_pb2, common_pb2, node_pb2, node_pb2_grpc


def _foreign_reports(metrics_address: str) -> float:
    body = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10).read().decode()
    for line in body.splitlines():
        if line.startswith("synergyd_foreign_task_reports_total "):
            return float(line.split()[-1])
    return 0.0


def test_a_node_cannot_end_a_job_placed_on_another_node(start_daemon, start_agent) -> None:
    d = start_daemon()
    admin = d.admin()
    owner = start_agent(d, "owner", gpus=2)
    job = admin.submit("victim", gpus=2)
    wait_for(lambda: admin.state(job.id) == "running" and owner.running(), what="job running on owner")
    info = admin.describe(job.id)
    assert [p.node_id for p in info.placements] == ["owner"]

    stub, auth = _register_thief(d)
    forged = node_pb2.TaskStatus(
        ref=node_pb2.TaskRef(job_id=job.id, attempt=info.attempt, rank=0),
        state=node_pb2.TASK_STATE_EXITED,
        exit_code=1,
    )
    reply = stub.Heartbeat(
        node_pb2.HeartbeatRequest(node_id="thief", tasks=[forged], instance_id="thief-1"),
        metadata=auth,
        timeout=RPC_TIMEOUT,
    )
    # The heartbeat commits whatever it decides before answering: the job must be untouched.
    after = admin.describe(job.id)
    assert admin.state(job.id) == "running", after.state_reason
    assert after.attempt == info.attempt and [p.node_id for p in after.placements] == ["owner"]
    assert [(r.job_id, r.rank) for r in reply.forget] == [(job.id, 0)]  # the thief may drop it
    wait_for(lambda: _foreign_reports(d.metrics_address) >= 1, what="foreign report counted on /metrics")
    wait_for(lambda: "task.foreign_report" in d.log_text(), what="foreign report logged")
    assert owner.launches == [(job.id, info.attempt, 0)]  # the owner's task was never disturbed


def test_a_node_cannot_hold_up_a_job_placed_on_another_node(start_daemon, start_agent) -> None:
    """A forged RUNNING report must not count as one of the job's live processes either: it
    used to keep a drained job 'stopping' until --stop-timeout-s, after its real rank exited 75."""
    import threading

    d = start_daemon("--stop-timeout-s", "600")
    admin = d.admin()
    owner = start_agent(d, "owner", gpus=2)
    job = admin.submit("held", gpus=2)
    wait_for(lambda: admin.state(job.id) == "running" and owner.running(), what="job running on owner")
    info = admin.describe(job.id)

    stub, auth = _register_thief(d)
    forged = node_pb2.TaskStatus(
        ref=node_pb2.TaskRef(job_id=job.id, attempt=info.attempt, rank=0), state=node_pb2.TASK_STATE_RUNNING, pid=1
    )
    done, delivered = threading.Event(), threading.Event()

    def keep_reporting() -> None:
        while not done.is_set():
            stub.Heartbeat(node_pb2.HeartbeatRequest(node_id="thief", tasks=[forged], instance_id="thief-1"),
                           metadata=auth, timeout=RPC_TIMEOUT)
            delivered.set()  # the daemon answered: the forged report is in its observed state
            done.wait(0.05)

    reporter = threading.Thread(target=keep_reporting, daemon=True)
    reporter.start()
    try:
        assert delivered.wait(30), "the forged heartbeat was never answered"
        admin.DrainNode(admin_pb2.DrainNodeRequest(node_id="owner", reason="maintenance"))
        wait_for(lambda: admin.state(job.id) == "queued", timeout=60, what="the drained job to be requeued")
    finally:
        done.set()
        reporter.join(timeout=10)


def _register_thief(d):
    """A second node, "thief", registered straight over the NodeService: its stub and auth."""
    stub = node_pb2_grpc.NodeServiceStub(channel(d.address))
    auth = md(d.cluster_token)
    stub.RegisterNode(
        node_pb2.RegisterNodeRequest(
            node_id="thief", hostname="thief", capacity=common_pb2.Resources(gpus=1, cpus=8, mem_gb=64),
            instance_id="thief-1",
        ),
        metadata=auth,
        timeout=RPC_TIMEOUT,
    )
    return stub, auth
