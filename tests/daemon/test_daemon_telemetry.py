"""Issue 7, daemon side: telemetry in heartbeats (validated, live, shown by ListNodes,
DescribeJob and /metrics), the agent's cgroup mode, OOM as a kind. A real synergyd; the
node side is spoken directly over NodeService so every field can be set (and broken)."""
from __future__ import annotations

import math
import urllib.request
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from synergyd_harness import DaemonProcess, channel, md, wait_for
from synergy.v1 import admin_pb2, common_pb2, node_pb2, node_pb2_grpc


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path_factory.mktemp("tele") / "state", "--log-level", "warning").start()
    yield d
    d.kill()


class Node:
    def __init__(self, d: DaemonProcess, node_id: str, **register: object) -> None:
        self.ch = channel(d.address)
        self.stub = node_pb2_grpc.NodeServiceStub(self.ch)
        self.md = md(d.cluster_token)
        self.node_id = node_id
        self.stub.RegisterNode(node_pb2.RegisterNodeRequest(
            node_id=node_id, capacity=common_pb2.Resources(gpus=0, cpus=8, mem_gb=16), instance_id="i-" + node_id,
            **register), metadata=self.md, timeout=10)

    def beat(self, **kw: object) -> node_pb2.HeartbeatResponse:
        return self.stub.Heartbeat(node_pb2.HeartbeatRequest(node_id=self.node_id, instance_id="i-" + self.node_id,
                                                             **kw), metadata=self.md, timeout=10)


def usage(cpu: float = 1.5, bw: float = 3.2) -> common_pb2.ResourceUsage:
    return common_pb2.ResourceUsage(
        cpu_cores=cpu, rss_bytes=300 * 2**20, page_faults=12, io_read_bytes=4096, io_write_bytes=0,
        cpu_pressure=common_pb2.Pressure(some_avg10=2.5), mem_bandwidth=common_pb2.MemoryBandwidth(
            gb_per_s=bw, source="estimate"))


def test_cgroup_mode_and_memory_not_enforced_are_listed(daemon: DaemonProcess) -> None:
    Node(daemon, "nocg", cgroup_mode="none", memory_enforced=False)
    Node(daemon, "v1cg", cgroup_mode="v1", memory_enforced=True)
    with pytest.raises(grpc.RpcError) as bad:
        Node(daemon, "weird", cgroup_mode="v3")
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and bad.value.details().startswith("cgroup_mode:")
    nodes = {n.node_id: n for n in daemon.admin().ListNodes(admin_pb2.ListNodesRequest()).nodes}
    assert (nodes["nocg"].cgroup_mode, nodes["nocg"].memory_enforced) == ("none", False)
    assert (nodes["v1cg"].cgroup_mode, nodes["v1cg"].memory_enforced) == ("v1", True)
    assert "weird" not in nodes


@pytest.mark.parametrize("field, value, culprit", [
    ("cpu_cores", math.nan, "telemetry.usage.cpu_cores"),
    ("cpu_cores", -1.0, "telemetry.usage.cpu_cores"),
    ("rss_bytes", 2**60, "telemetry.usage.rss_bytes"),
])
def test_bad_telemetry_is_refused_naming_the_field(daemon: DaemonProcess, field: str, value: float,
                                                   culprit: str) -> None:
    n = Node(daemon, "badtele")
    u = usage()
    setattr(u, field, value)
    with pytest.raises(grpc.RpcError) as bad:
        n.beat(telemetry=common_pb2.NodeTelemetry(usage=u))
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and bad.value.details().startswith(culprit)
    u = usage()
    u.mem_bandwidth.source = ""
    with pytest.raises(grpc.RpcError) as bad:
        n.beat(telemetry=common_pb2.NodeTelemetry(usage=u))
    assert bad.value.details().startswith("telemetry.usage.mem_bandwidth.source")
    with pytest.raises(grpc.RpcError) as bad:
        n.beat(telemetry=common_pb2.NodeTelemetry(cpu_util_pct=250))
    assert bad.value.details().startswith("telemetry.cpu_util_pct")
    n.beat(telemetry=common_pb2.NodeTelemetry(usage=usage()))  # still serving, and good input passes


def _launched(n: Node, job_id: int) -> node_pb2.Instruction:
    def launch() -> node_pb2.Instruction | None:
        reply = n.beat()
        return next((i for i in reply.instructions if i.kind == node_pb2.INSTRUCTION_KIND_LAUNCH
                     and i.ref.job_id == job_id), None)
    return wait_for(launch, timeout=30, what=f"job {job_id} to be launched on {n.node_id}")


def test_telemetry_reaches_nodes_describe_and_metrics(daemon: DaemonProcess) -> None:
    n = Node(daemon, "tele", cgroup_mode="v1", memory_enforced=True)
    admin = daemon.admin()
    job = admin.submit("tele-cpu", gpus=0, kind="cpu", cpus_hint=2, mem_gb_hint=1, command=("sleep", "9")).id
    ins = _launched(n, job)
    task = node_pb2.TaskStatus(ref=ins.ref, state=node_pb2.TASK_STATE_RUNNING, pid=4242, placement=ins.placement,
                               usage=usage(cpu=1.75, bw=2.5))
    tele = common_pb2.NodeTelemetry(cpu_util_pct=40, usage=usage(cpu=3.0, bw=6.5),
                                    peak_mem_bandwidth=common_pb2.MemoryBandwidth(gb_per_s=20, source="estimate"))
    n.beat(telemetry=tele, tasks=[task])
    (node,) = [x for x in admin.ListNodes(admin_pb2.ListNodesRequest()).nodes if x.node_id == "tele"]
    assert node.telemetry.usage.mem_bandwidth.gb_per_s == 6.5
    assert node.telemetry.peak_mem_bandwidth.source == "estimate"
    info = admin.describe(job)
    (t,) = info.tasks
    assert (t.rank, t.node_id, t.state, t.pid) == (0, "tele", "running", 4242)
    assert t.usage.cpu_cores == 1.75 and t.usage.mem_bandwidth.source == "estimate"
    assert t.usage.rss_bytes == 300 * 2**20
    text = urllib.request.urlopen(f"http://{daemon.metrics_address}/metrics", timeout=10).read().decode()
    assert 'synergyd_node_memory_bandwidth_bytes_per_second{node="tele",source="estimate"} 6.5e+09' in text
    assert 'synergyd_node_memory_bandwidth_peak_bytes_per_second{node="tele",source="estimate"} 2e+10' in text
    assert 'synergyd_node_cpu_cores{node="tele"} 3.0' in text
    # OOM is a kind: the reason says so whatever the message's wording.
    oom = node_pb2.TaskStatus(ref=ins.ref, state=node_pb2.TASK_STATE_EXITED, exit_code=-9, oom_killed=True,
                              placement=ins.placement, message="killed")
    n.beat(tasks=[oom])
    wait_for(lambda: admin.state(job) == "failed", timeout=20, what="the OOM-killed job to fail")
    assert admin.describe(job).state_reason.startswith(
        "rank 0 on node tele was killed by its memory limit (OOM)"), admin.describe(job).state_reason
    admin.close()


def test_heartbeat_replies_carry_throughput_and_baseline(daemon: DaemonProcess) -> None:
    """TaskProgress for the eliminator: the job's throughput from its renewals, and its best
    under the current allocation as baseline (a slowdown keeps the baseline)."""
    from synergy.v1 import job_pb2, job_pb2_grpc

    n = Node(daemon, "prog")
    admin = daemon.admin()
    job = admin.submit("prog-train", gpus=0, kind="cpu", cpus_hint=1, mem_gb_hint=1, command=("sleep", "9")).id
    ins = _launched(n, job)
    running = node_pb2.TaskStatus(ref=ins.ref, state=node_pb2.TASK_STATE_RUNNING, placement=ins.placement)
    assert not n.beat(tasks=[running]).progress  # nothing reported yet: no entry
    jobs = job_pb2_grpc.JobServiceStub(channel(daemon.address))
    jmd = md(ins.task.job_token)
    ref = ins.ref
    jobs.RegisterJobProcess(job_pb2.RegisterJobProcessRequest(
        job_id=ref.job_id, attempt=ref.attempt, rank=ref.rank, world_size=1, node_id="prog", pid=1),
        metadata=jmd, timeout=10)
    for rate, base in ((100.0, 100.0), (250.0, 250.0), (120.0, 250.0)):
        jobs.RenewLease(job_pb2.RenewLeaseRequest(job_id=ref.job_id, attempt=ref.attempt, rank=ref.rank, step=10,
                                                  samples_per_s=rate), metadata=jmd, timeout=10)
        (p,) = n.beat(tasks=[running]).progress
        assert (p.ref.job_id, p.throughput, p.baseline_throughput) == (job, rate, base)
    admin.close()
