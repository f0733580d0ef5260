"""Defect 7: smaller input gaps between what the proto promises and what the daemon took.

Job refs of non-ASCII digits ('²' crashed DescribeJob with INTERNAL; '٣' and '１２' resolved
to jobs 3 and 12 and cancelled them), API-only ranges (priority ±10^6, iterations 2^62,
where the CLI capped priority at ±1000), an empty argument, and NUL in a checkpoint path.
"""

from __future__ import annotations

import grpc
import pytest

from synergyd_harness import md, wait_for
from synergy.v1 import admin_pb2, job_pb2, job_pb2_grpc


def rpc_error(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code(), err.value.details()


def test_only_ascii_digits_are_job_ids(start_daemon, cli) -> None:
    daemon = start_daemon()
    admin = daemon.admin()
    for i in range(12):
        admin.submit(f"j{i + 1}")
    for ref in ("²", "٣", "１２", "3\u0663"):
        for call in (lambda: admin.describe(ref),
                     lambda: admin.CancelJob(admin_pb2.CancelJobRequest(job=ref))):
            code, details = rpc_error(call)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (ref, code, details)
            assert details.startswith("job: ") and "ASCII digits" in details
        run = cli(daemon, "cancel", ref)
        assert run.code == 2 and run.err.startswith("synergy: error: JOB: ") and "ASCII digits" in run.err
    assert admin.state(3) == "queued" and admin.state(12) == "queued"
    code, details = rpc_error(lambda: admin.describe("9" * 25))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("job: ")
    assert "rpc.internal_error" not in daemon.log_text()
    assert admin.describe("12").name == "j12"
    admin.close()


@pytest.mark.parametrize("fields, message", [
    ({"priority": 10**6}, "spec.priority: must be at most 1000, got 1000000"),
    ({"priority": -(10**6)}, "spec.priority: must be at least -1000, got -1000000"),
    ({"iterations": 2**62}, f"spec.iterations: must be at most 1000000000000, got {2**62}"),
    ({"command": ["python", ""]}, "spec.command[1]: must not be empty"),
])
def test_api_ranges_match_the_cli(start_daemon, fields: dict, message: str) -> None:
    daemon = start_daemon()
    admin = daemon.admin()
    code, details = rpc_error(lambda: admin.submit("gap", **fields))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(message), details
    assert admin.jobs() == []
    admin.close()


def test_checkpoint_report_with_nul_is_refused(start_daemon, start_agent) -> None:
    daemon = start_daemon()
    admin = daemon.admin()
    agent = start_agent(daemon, "n1")
    job = admin.submit("ckpt", env={"FAKE_STEP_S": "0.05"})
    wait_for(lambda: admin.state(job.id) == "running", what="the job to run")
    task = wait_for(lambda: next((i.task for i in agent.instructions if i.task.job_token), None), what="launch")
    stub = job_pb2_grpc.JobServiceStub(agent.channel)
    request = job_pb2.ReportCheckpointRequest(job_id=job.id, attempt=task.ref.attempt, step=1, path="/ckpt/1\x00x")
    code, details = rpc_error(lambda: stub.ReportCheckpoint(request, metadata=md(task.job_token), timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details == "path: must not contain NUL characters"
    assert admin.describe(job.id).last_checkpoint_path == ""
    admin.close()
