"""The CLI side of issue 7 against a real synergyd: CPU-only jobs (`--kind cpu`), node
telemetry and "memory not enforced" in `synergy nodes`, per-rank usage in `describe`."""
from __future__ import annotations

import json

import pytest

from synergy.scheduler.jobspec import JobSpec, SpecError, validate


def test_cpu_kind_rules() -> None:
    base = JobSpec(name="c", command=("x",), gpus=0, kind="cpu", cpus_hint=2, mem_gb_hint=4)
    assert validate(base) is base
    for change, field in (({"gpus": 1}, "spec.gpus"), ({"cpus_hint": 0}, "spec.cpus_hint"),
                          ({"mem_gb_hint": 0}, "spec.mem_gb_hint"), ({"kind": "gpu"}, "spec.kind")):
        with pytest.raises(SpecError) as exc:
            validate(JobSpec(**{**base.__dict__, **change}))
        assert exc.value.field == field


def test_submit_kind_cpu_and_describe(cli) -> None:
    r = cli("submit", "--name", "cpu7", "--kind", "cpu", "--cpus", "2", "--memory-gb", "1",
            "--", "python", "-c", "pass")
    assert r.code == 0, r.err
    r = cli("describe", "cpu7")
    assert r.code == 0 and "cpu" in r.out and "request" in r.out
    r = cli("submit", "--name", "cpu8", "--kind", "cpu", "--", "python", "-c", "pass")
    assert r.code != 0 and "spec.cpus_hint (--cpus)" in r.err and "Traceback" not in r.err
    # issue 15 (7): the missing request names its flag, not the spec file's key (memory_gb)
    r = cli("submit", "--name", "cpu8", "--kind", "cpu", "--cpus", "1", "--", "python", "-c", "pass")
    assert r.code != 0 and "spec.mem_gb_hint (--memory-gb): must be given" in r.err, r.err
    r = cli("submit", "--name", "cpu9", "--kind", "cpu", "--gpus", "1", "--cpus", "1", "--memory-gb", "1",
            "--", "python", "-c", "pass")
    assert r.code != 0 and "spec.gpus" in r.err
    info = json.loads(cli("--json", "describe", "cpu7").out)
    assert info["spec"]["kind"] == "cpu" and info["spec"].get("gpus", 0) == 0


def test_nodes_show_cpu_bandwidth_and_memory_not_enforced(cli, synergyd) -> None:
    from synergyd_harness import channel, md
    from synergy.v1 import common_pb2, node_pb2, node_pb2_grpc

    stub = node_pb2_grpc.NodeServiceStub(channel(synergyd.address))
    meta = md(synergyd.cluster_token)
    stub.RegisterNode(node_pb2.RegisterNodeRequest(
        node_id="cli-nocg", capacity=common_pb2.Resources(gpus=0, cpus=4, mem_gb=8), instance_id="x",
        cgroup_mode="none", memory_enforced=False), metadata=meta, timeout=10)
    tele = common_pb2.NodeTelemetry(
        cpu_util_pct=37.5, usage=common_pb2.ResourceUsage(
            cpu_cores=1.5, rss_bytes=2**30, mem_bandwidth=common_pb2.MemoryBandwidth(gb_per_s=4.2, source="estimate"),
            io_pressure=common_pb2.Pressure(some_avg10=1.5, full_avg10=0.5)),
        peak_mem_bandwidth=common_pb2.MemoryBandwidth(gb_per_s=16, source="estimate"))
    stub.Heartbeat(node_pb2.HeartbeatRequest(node_id="cli-nocg", instance_id="x", telemetry=tele),
                   metadata=meta, timeout=10)
    out = cli("nodes").out
    line = next(x for x in out.splitlines() if "cli-nocg" in x)
    assert "memory not enforced" in line and "37.5%" in line and "4.2/16 GB/s (estimate)" in line
    wide = next(x for x in cli("nodes", "--wide").out.splitlines() if "cli-nocg" in x)
    assert "1.0G" in wide and "io 1.5/0.5" in wide and "none" in wide


def test_describe_lists_tasks_with_usage_and_logs_refuses_bad_input(cli, synergyd) -> None:
    from synergyd_harness import channel, md, wait_for
    from synergy.v1 import common_pb2, node_pb2, node_pb2_grpc

    stub = node_pb2_grpc.NodeServiceStub(channel(synergyd.address))
    meta = md(synergyd.cluster_token)
    stub.RegisterNode(node_pb2.RegisterNodeRequest(
        node_id="cli-run", capacity=common_pb2.Resources(gpus=0, cpus=4, mem_gb=8), instance_id="y",
        cgroup_mode="v1", memory_enforced=True), metadata=meta, timeout=10)
    assert cli("submit", "--name", "cpu-desc", "--kind", "cpu", "--cpus", "1", "--memory-gb", "1",
               "--", "sleep", "60").code == 0
    job_id = json.loads(cli("--json", "describe", "cpu-desc").out)["id"]

    def launch() -> node_pb2.Instruction | None:
        reply = stub.Heartbeat(node_pb2.HeartbeatRequest(node_id="cli-run", instance_id="y"), metadata=meta, timeout=10)
        return next((i for i in reply.instructions
                     if i.kind == node_pb2.INSTRUCTION_KIND_LAUNCH and i.ref.job_id == job_id), None)

    ins = wait_for(launch, timeout=30, what="a launch on cli-run")
    usage = common_pb2.ResourceUsage(cpu_cores=0.75, rss_bytes=5 * 2**20,
                                     mem_bandwidth=common_pb2.MemoryBandwidth(gb_per_s=1.25, source="estimate"))
    stub.Heartbeat(node_pb2.HeartbeatRequest(node_id="cli-run", instance_id="y", tasks=[node_pb2.TaskStatus(
        ref=ins.ref, state=node_pb2.TASK_STATE_RUNNING, pid=777, placement=ins.placement, usage=usage)]),
        metadata=meta, timeout=10)
    out = cli("describe", "cpu-desc").out
    row = next(x for x in out.splitlines() if "cli-run" in x and "777" in x)
    assert "0.75" in row and "5.0M" in row and "1.2 GB/s (estimate)" in row, out
    r = cli("logs", "cpu-desc", "--rank", "-1")
    assert r.code == 2 and "--rank" in r.err
    r = cli("logs", "no such job!")
    assert r.code == 2 and "job" in r.err and "Traceback" not in r.err
