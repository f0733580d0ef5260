"""Periodic checkpoints on the daemon's side, against one live synergyd and hand-driven nodes and ranks:
the step every rank hears in RenewLease, a failed write kept for describe, /metrics, bad input."""

from __future__ import annotations

import time
import urllib.request
from typing import Iterator

import grpc
import pytest

from synergyd_harness import Admin, DaemonProcess, channel, md, wait_for
from synergy.v1 import admin_pb2, common_pb2, job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc


@pytest.fixture
def daemon(tmp_path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path / "state", "--checkpoint-every-s", "600", "--node-timeout-s", "60",
                      "--lease-grace-s", "60", round_s=0.3).start()
    yield d
    d.kill()


def code_of(call, request, **kw) -> tuple[grpc.StatusCode, str]:
    try:
        call(request, timeout=5, **kw)
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


def test_every_rank_hears_the_same_checkpoint_step_and_failures_reach_describe(daemon: DaemonProcess) -> None:
    admin: Admin = daemon.admin()
    nodes = node_pb2_grpc.NodeServiceStub(channel(daemon.address))
    cluster = md(daemon.cluster_token)
    for n in ("a", "b"):
        nodes.RegisterNode(node_pb2.RegisterNodeRequest(
            node_id=n, capacity=common_pb2.Resources(gpus=1, cpus=4, mem_gb=16)), metadata=cluster, timeout=5)
    job = admin.submit("two-ranks", gpus=2, checkpoint_dir="/tmp/ckpt", checkpoint_every_s=1).id  # its own 1 s
    launches: dict[str, node_pb2.TaskSpec] = {}

    def heartbeat() -> bool:
        for n in ("a", "b"):
            tasks = [node_pb2.TaskStatus(ref=t.ref, state=node_pb2.TASK_STATE_RUNNING, placement=t.placement)
                     for key, t in launches.items() if key == n]
            r = nodes.Heartbeat(node_pb2.HeartbeatRequest(node_id=n, tasks=tasks), metadata=cluster, timeout=5)
            for ins in r.instructions:
                if ins.kind == node_pb2.INSTRUCTION_KIND_LAUNCH:
                    launches[n] = ins.task
        return len(launches) == 2

    wait_for(heartbeat, what="both ranks to be launched")
    task = next(iter(launches.values()))
    jobs = job_pb2_grpc.JobServiceStub(channel(daemon.address))
    token = md(task.job_token)
    attempt = task.ref.attempt
    for rank in (0, 1):
        jobs.RegisterJobProcess(job_pb2.RegisterJobProcessRequest(job_id=job, attempt=attempt, rank=rank, world_size=2),
                                metadata=token, timeout=5)

    def renew(rank: int, step: int, pace: float = 10) -> int:
        heartbeat()
        r = jobs.RenewLease(job_pb2.RenewLeaseRequest(job_id=job, attempt=attempt, rank=rank, step=step,
                                                      steps_per_s=pace), metadata=token, timeout=5)
        assert r.action == job_pb2.LEASE_ACTION_CONTINUE
        return r.checkpoint_at_step

    # Due (past its 1 s), but no step is agreed before every rank has renewed with a pace: the
    # margin would be one step, and a rank already past it would snapshot a later step.
    time.sleep(1.2)
    assert renew(0, 3) == 0 and renew(0, 4) == 0  # rank 1 has not renewed
    assert renew(1, 3, pace=0) == 0 and renew(0, 5) == 0  # rank 1's pace is not known
    at = wait_for(lambda: renew(0, 10) or renew(1, 10), what="a periodic checkpoint to be due")
    assert at > 10 and renew(0, 10) == at and renew(1, 10) == at  # agreed once, the same for both ranks
    assert renew(0, at + 1) == at  # pending until every rank has passed it
    assert renew(1, at + 1) == 0   # then the next interval starts

    # A failed write is kept for describe, a good one clears it; the checkpoint's time is shown.
    report = job_pb2.ReportCheckpointRequest(job_id=job, attempt=attempt, step=at, error="checkpoint dir full: x")
    jobs.ReportCheckpoint(report, metadata=token, timeout=5)
    info = admin.describe(job)
    assert info.last_checkpoint_error == "checkpoint dir full: x" and not info.last_checkpoint_path
    jobs.ReportCheckpoint(job_pb2.ReportCheckpointRequest(job_id=job, attempt=attempt, step=at, path="/tmp/ckpt/s"),
                          metadata=token, timeout=5)
    info = admin.describe(job)
    assert (info.last_checkpoint_error, info.last_checkpoint_step) == ("", at) and info.last_checkpoint_unix_s > 0
    both = job_pb2.ReportCheckpointRequest(job_id=job, attempt=attempt, step=at, path="/p", error="e")
    code, details = code_of(jobs.ReportCheckpoint, both, metadata=token)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("error:"), details
    code, details = code_of(jobs.ReportCheckpoint, job_pb2.ReportCheckpointRequest(job_id=job, attempt=attempt),
                            metadata=token)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("path:"), details

    def scraped() -> str:
        text = urllib.request.urlopen(f"http://{daemon.metrics_address}/metrics", timeout=5).read().decode()
        return text if f'synergyd_job_checkpoint_step{{job="{job}"}} {float(at)}' in text else ""

    text = wait_for(scraped, what="the checkpoint gauges")
    assert f'synergyd_job_checkpoint_age_seconds{{job="{job}"}}' in text
    admin.close()


@pytest.mark.parametrize("kw, problem", [
    ({"checkpoint_every_s": 0.5, "checkpoint_dir": "/c"}, "must be 0 or from 1 to 604800"),
    ({"checkpoint_every_s": 30}, "needs checkpoint_dir"),
    ({"checkpoint_every_s": float("nan"), "checkpoint_dir": "/c"}, "must be 0"),
])
def test_a_bad_interval_is_refused_naming_the_field(daemon: DaemonProcess, kw: dict, problem: str) -> None:
    admin = daemon.admin()
    spec = admin_pb2.JobSpec(name="bad", gpus=1, command=["python", "t.py"], **kw)
    code, details = code_of(admin.stub.SubmitJob, admin_pb2.SubmitJobRequest(spec=spec), metadata=admin.md)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert details.startswith("spec.checkpoint_every_s:") and problem in details, details
    assert not admin.jobs()
    admin.close()
