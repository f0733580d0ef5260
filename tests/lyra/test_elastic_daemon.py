"""Elastic jobs through a live synergyd with fake agents: accepted, sized by the core, and
rescaled through the lease path (stop at an agreed step, checkpoint, relaunch)."""
from __future__ import annotations

import grpc

from synergyd_harness import wait_for


def gpus_of(info) -> int:
    return int(sum(p.gpus for p in info.placements))


def test_elastic_job_grows_and_shrinks_through_relaunches(start_daemon, start_agent) -> None:
    d = start_daemon("--policy", "fifo")
    start_agent(d, "n1", gpus=4)
    admin = d.admin()
    job = admin.submit("el", gpus=2, min_gpus=1, max_gpus=8, model="resnet18", iterations=10**6,
                       env={"FAKE_STEP_S": "0.01"})
    assert (job.spec.min_gpus, job.spec.max_gpus) == (1, 8)
    # Alone on a 4-GPU node, phase two hands it every GPU.
    wait_for(lambda: admin.state("el") == "running" and gpus_of(admin.describe("el")) == 4,
             timeout=30, what="el to run on 4 GPUs")
    first = admin.describe("el")
    assert first.attempt == 1

    # A second node: growing to 8 GPUs is worth more than a relaunch costs, so the job is
    # stopped at an agreed step, checkpoints and comes back on both nodes.
    start_agent(d, "n2", gpus=4)
    wait_for(lambda: admin.state("el") == "running" and gpus_of(admin.describe("el")) == 8,
             timeout=60, what="el to grow to 8 GPUs")
    grown = admin.describe("el")
    assert grown.attempt >= 2 and grown.last_checkpoint_step > 0
    assert {p.node_id for p in grown.placements} == {"n1", "n2"}

    # A fixed 6-GPU job arrives: phase one gives it its GPUs, and el shrinks to what is left
    # instead of making it wait.
    admin.submit("fixed", gpus=6, model="resnet18", iterations=10**6, env={"FAKE_STEP_S": "0.01"})
    wait_for(lambda: admin.state("fixed") == "running", timeout=60, what="fixed to run")
    wait_for(lambda: admin.state("el") == "running" and gpus_of(admin.describe("el")) == 2,
             timeout=60, what="el to shrink to 2 GPUs")
    shrunk = admin.describe("el")
    assert shrunk.attempt > grown.attempt and shrunk.last_checkpoint_step >= grown.last_checkpoint_step
    admin.close()


def test_bad_elastic_range_is_invalid_argument(start_daemon) -> None:
    d = start_daemon("--max-job-gpus", "8")
    admin = d.admin()
    for kw, field in (({"min_gpus": 4, "max_gpus": 2, "gpus": 4}, "spec.max_gpus"),
                      ({"min_gpus": 2, "max_gpus": 16, "gpus": 2}, "spec.max_gpus"),
                      ({"min_gpus": 4, "max_gpus": 8, "gpus": 2}, "spec.gpus")):
        try:
            admin.submit("bad", **kw)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert exc.details().startswith(field + ":"), exc.details()
        else:
            raise AssertionError(f"{kw} was accepted")
    assert admin.jobs() == []
    admin.close()
