"""The daemon's API edges against one live synergyd: auth, validation, health, reflection, metrics."""

from __future__ import annotations

import stat
import urllib.request
from typing import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from synergyd_harness import Admin, DaemonProcess, channel, md, wait_for
from synergy.v1 import admin_pb2, common_pb2, job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path_factory.mktemp("api") / "state", "--max-job-gpus", "8", round_s=0.3)
    d.start()
    yield d
    d.kill()


@pytest.fixture(scope="module")
def admin(daemon: DaemonProcess) -> Iterator[Admin]:
    a = daemon.admin()
    yield a
    a.close()


@pytest.fixture(scope="module")
def node(daemon: DaemonProcess) -> Iterator[node_pb2_grpc.NodeServiceStub]:
    ch = channel(daemon.address)
    yield node_pb2_grpc.NodeServiceStub(ch)
    ch.close()


def code_of(call, *args, **kw) -> tuple[grpc.StatusCode, str]:
    try:
        call(*args, timeout=5, **kw)
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


def spec(**kw: object) -> admin_pb2.SubmitJobRequest:
    base: dict[str, object] = {"name": "ok", "gpus": 1, "command": ["python", "train.py"]}
    base.update(kw)
    return admin_pb2.SubmitJobRequest(spec=admin_pb2.JobSpec(**base))


# -- state dir and tokens ---------------------------------------------------------------------------
def test_first_start_generates_owner_only_tokens(daemon: DaemonProcess) -> None:
    for name in ("admin.token", "cluster.token", "synergyd.sqlite"):
        mode = stat.S_IMODE((daemon.state_dir / name).stat().st_mode)
        assert mode == 0o600, (name, oct(mode))
    # 0711: others may enter the dir to reach the Unix socket (issue 16), never list or read it.
    assert stat.S_IMODE(daemon.state_dir.stat().st_mode) == 0o711
    assert (daemon.state_dir / "address").read_text().strip() == daemon.address


def test_second_daemon_on_the_same_state_dir_refuses_to_start(daemon: DaemonProcess) -> None:
    twin = DaemonProcess(daemon.state_dir)
    with pytest.raises(AssertionError, match="another synergyd"):
        twin.start()
    assert daemon.alive()


# -- authentication ---------------------------------------------------------------------------------
def test_missing_or_wrong_token_is_unauthenticated(daemon: DaemonProcess) -> None:
    a = Admin(daemon.address, "not-the-token")
    assert code_of(a.stub.ListJobs, admin_pb2.ListJobsRequest())[0] == grpc.StatusCode.UNAUTHENTICATED
    assert code_of(a.stub.ListJobs, admin_pb2.ListJobsRequest(), metadata=a.md)[0] == grpc.StatusCode.UNAUTHENTICATED
    a.close()


def test_a_token_of_the_wrong_kind_is_permission_denied(daemon: DaemonProcess, node) -> None:
    a = Admin(daemon.address, daemon.cluster_token)  # agent token on the admin service
    code, details = code_of(a.stub.ListJobs, admin_pb2.ListJobsRequest(), metadata=a.md)
    assert code == grpc.StatusCode.PERMISSION_DENIED and "user token" in details
    a.close()
    request = node_pb2.RegisterNodeRequest(node_id="x", capacity=common_pb2.Resources(gpus=1, cpus=1, mem_gb=1))
    code, _ = code_of(node.RegisterNode, request, metadata=md(daemon.admin_token))
    assert code == grpc.StatusCode.PERMISSION_DENIED


def test_streaming_admin_calls_check_the_token_before_sending_anything(daemon: DaemonProcess) -> None:
    """Auth wraps every handler kind, server-streaming ones (backup, logs) included."""
    for token, expected in (("not-the-token", grpc.StatusCode.UNAUTHENTICATED),
                            (daemon.cluster_token, grpc.StatusCode.PERMISSION_DENIED)):
        a = Admin(daemon.address, token)
        code, _ = code_of(lambda *args, **kw: list(a.stub.BackupDatabase(*args, **kw)),
                          admin_pb2.BackupDatabaseRequest(), metadata=a.md)
        assert code == expected
        a.close()
    a = daemon.admin()
    assert len(b"".join(c.data for c in a.stub.BackupDatabase(admin_pb2.BackupDatabaseRequest(), metadata=a.md,
                                                                timeout=10))) > 0
    a.close()


def test_a_job_can_renew_only_its_own_lease(daemon: DaemonProcess, admin: Admin, node) -> None:
    cluster = md(daemon.cluster_token)
    node.RegisterNode(
        node_pb2.RegisterNodeRequest(node_id="auth-node", capacity=common_pb2.Resources(gpus=2, cpus=8, mem_gb=64)),
        metadata=cluster,
        timeout=5,
    )
    ids = [admin.submit(f"auth-{i}", gpus=1).id for i in range(2)]
    launches: dict[int, node_pb2.TaskSpec] = {}

    def heartbeat() -> bool:
        tasks = [
            node_pb2.TaskStatus(ref=t.ref, state=node_pb2.TASK_STATE_RUNNING, placement=t.placement)
            for t in launches.values()
        ]
        r = node.Heartbeat(node_pb2.HeartbeatRequest(node_id="auth-node", tasks=tasks), metadata=cluster, timeout=5)
        for ins in r.instructions:
            if ins.kind == node_pb2.INSTRUCTION_KIND_LAUNCH:
                launches[ins.ref.job_id] = ins.task
        return set(ids) <= set(launches)

    wait_for(heartbeat, what="both jobs to be launched")
    jobs = job_pb2_grpc.JobServiceStub(channel(daemon.address))
    mine, other = launches[ids[0]], launches[ids[1]]
    renew_other = job_pb2.RenewLeaseRequest(job_id=ids[1], attempt=other.ref.attempt)
    code, details = code_of(jobs.RenewLease, renew_other, metadata=md(mine.job_token))
    assert code == grpc.StatusCode.PERMISSION_DENIED and f"job {ids[0]}" in details
    renew_own = job_pb2.RenewLeaseRequest(job_id=ids[0], attempt=mine.ref.attempt, step=3)
    reply = jobs.RenewLease(renew_own, metadata=md(mine.job_token), timeout=5)
    assert reply.action == job_pb2.LEASE_ACTION_CONTINUE
    assert code_of(admin.stub.ListJobs, admin_pb2.ListJobsRequest(), metadata=md(mine.job_token))[0] == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    # Tokens never reach the log.
    log = daemon.log_text()
    for token in (daemon.admin_token, daemon.cluster_token, mine.job_token, other.job_token):
        assert token not in log
    for i in ids:
        admin.CancelJob(admin_pb2.CancelJobRequest(job=str(i), reason="done"))


# -- standard tooling -------------------------------------------------------------------------------
def test_health_and_reflection_need_no_token(daemon: DaemonProcess) -> None:
    ch = channel(daemon.address)
    health = health_pb2_grpc.HealthStub(ch)
    for service in ("", "synergy.v1.AdminService", "synergy.v1.NodeService", "synergy.v1.JobService"):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(ch)
    answer = next(
        iter(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5))
    )
    names = {s.name for s in answer.list_services_response.service}
    assert {"synergy.v1.AdminService", "synergy.v1.JobService", "synergy.v1.NodeService"} <= names
    ch.close()


def test_metrics_and_healthz(daemon: DaemonProcess, admin: Admin) -> None:
    base = f"http://{daemon.metrics_address}"
    assert urllib.request.urlopen(base + "/healthz", timeout=5).read() == b"ok\n"
    code_of(admin.stub.DescribeJob, admin_pb2.DescribeJobRequest(job="no-such-job"), metadata=admin.md)

    def scraped() -> str:
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        return text if "synergyd_resource_gpus{" in text else ""

    text = wait_for(scraped, what="gauges to be published")
    for name in (
        "synergyd_round_decision_seconds_bucket",
        "synergyd_queue_length",
        "synergyd_running_jobs",
        'synergyd_resource_gpus{kind="free"}',
        "synergyd_rpc_errors_total",
        "synergyd_lease_renewals_total",
        "synergyd_rounds_total",
    ):
        assert name in text, name
    assert 'code="NOT_FOUND",method="DescribeJob"' in text


# -- bad input --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "request_kw, field",
    [
        ({"gpus": 0}, "spec.gpus"),
        ({"gpus": -3}, "spec.gpus"),
        ({"gpus": 9}, "spec.gpus"),  # above --max-job-gpus 8
        ({"command": []}, "spec.command"),
        ({"command": ["", "x"]}, "spec.command[0]"),
        ({"name": ""}, "spec.name"),
        ({"name": "7up"}, "spec.name"),
        ({"name": "a" * 100}, "spec.name"),
        ({"command": ["x"] * 300}, "spec.command"),
        ({"env": {"BIG": "x" * 20000}}, "spec.env[BIG]"),
        ({"env": {"SYNERGY_JOB_TOKEN": "x"}}, "spec.env[SYNERGY_JOB_TOKEN]"),
        ({"cpus_hint": float("nan")}, "spec.cpus_hint"),
        ({"mem_gb_hint": -1.0}, "spec.mem_gb_hint"),
        ({"task": "vision"}, "spec.task"),
        ({"min_gpus": 1}, "spec.max_gpus"),  # below min_gpus
        ({"min_gpus": -1, "max_gpus": 4}, "spec.min_gpus"),
        ({"gpus": 2, "min_gpus": 2, "max_gpus": 16}, "spec.max_gpus"),  # above --max-job-gpus 8
        ({"iterations": -5}, "spec.iterations"),
        ({"profile": common_pb2.SensitivityProfile(task="image")}, "spec.profile"),
    ],
)
def test_bad_job_specs_are_invalid_argument_naming_the_field(admin: Admin, request_kw, field) -> None:
    code, details = code_of(admin.stub.SubmitJob, spec(**request_kw), metadata=admin.md)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(field + ":"), details


def test_oversized_message_is_refused_and_the_daemon_stays_up(daemon: DaemonProcess, admin: Admin) -> None:
    before = sorted((j.id, j.name) for j in admin.jobs())
    code, _ = code_of(admin.stub.SubmitJob, spec(name="oversized", command=["x" * 4000] * 1200), metadata=admin.md)
    assert code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT)
    assert daemon.alive()
    assert sorted((j.id, j.name) for j in admin.jobs()) == before  # answered, and nothing was created


def test_unknown_duplicate_and_unhostable_jobs(admin: Admin, node, daemon: DaemonProcess, start_agent) -> None:
    start_agent(daemon, "small-node", gpus=4)  # the largest node this test knows of
    assert code_of(admin.stub.DescribeJob, admin_pb2.DescribeJobRequest(job="424242"), metadata=admin.md)[0] == (
        grpc.StatusCode.NOT_FOUND
    )
    assert code_of(admin.stub.CancelJob, admin_pb2.CancelJobRequest(job="nope"), metadata=admin.md)[0] == (
        grpc.StatusCode.NOT_FOUND
    )
    code, details = code_of(admin.stub.DescribeJob, admin_pb2.DescribeJobRequest(job=""), metadata=admin.md)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("job:")
    twin = admin.submit("twin", gpus=1)
    code, details = code_of(admin.stub.SubmitJob, spec(name="twin"), metadata=admin.md)
    assert code == grpc.StatusCode.ALREADY_EXISTS and "twin" in details
    admin.CancelJob(admin_pb2.CancelJobRequest(job="twin", reason="reuse the name"))
    again = admin.submit("twin", gpus=1)  # an ended job's name is free again, for a new job
    assert again.id > twin.id and again.name == "twin" and admin.describe("twin").id == again.id
    admin.CancelJob(admin_pb2.CancelJobRequest(job="twin", reason="cleanup"))
    # Valid, but larger than any node ever registered here: accepted, and it says why it waits.
    big = admin.submit("eight", gpus=8)
    # A job submitted while a round is being applied first waits with "considered next
    # round"; the reason that matters is the one a decided round gives it.
    def round_reason() -> str:
        reason = admin.describe(big.id).waiting_reason
        return reason if reason and "next round" not in reason else ""

    reason = wait_for(round_reason, what="a waiting reason from a round")
    assert "8 GPUs" in reason, reason
    admin.CancelJob(admin_pb2.CancelJobRequest(job="eight"))


def test_bad_node_requests(daemon: DaemonProcess, node) -> None:
    cluster = md(daemon.cluster_token)
    cases = [
        (node_pb2.RegisterNodeRequest(node_id="", capacity=common_pb2.Resources(gpus=1)), "node_id"),
        (node_pb2.RegisterNodeRequest(node_id="bad id!", capacity=common_pb2.Resources(gpus=1)), "node_id"),
        (node_pb2.RegisterNodeRequest(node_id="n", capacity=common_pb2.Resources(gpus=1.5)), "capacity.gpus"),
        (node_pb2.RegisterNodeRequest(node_id="n", capacity=common_pb2.Resources(gpus=1, cpus=-1)), "capacity.cpus"),
        (
            node_pb2.RegisterNodeRequest(
                node_id="n", capacity=common_pb2.Resources(gpus=1), reserved=common_pb2.Resources(gpus=2)
            ),
            "reserved.gpus",
        ),
    ]
    for request, field in cases:
        code, details = code_of(node.RegisterNode, request, metadata=cluster)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(field + ":"), (field, details)
    code, _ = code_of(node.Heartbeat, node_pb2.HeartbeatRequest(node_id="never-registered"), metadata=cluster)
    assert code == grpc.StatusCode.NOT_FOUND


def test_policy_changes_at_runtime_and_rejects_unknown_names(admin: Admin) -> None:
    code, details = code_of(admin.stub.SetPolicy, admin_pb2.SetPolicyRequest(policy="random"), metadata=admin.md)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("policy:")
    code, details = code_of(admin.stub.SetPolicy, admin_pb2.SetPolicyRequest(mechanism="magic"), metadata=admin.md)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("mechanism:")
    reply = admin.SetPolicy(admin_pb2.SetPolicyRequest(policy="srtf", mechanism="greedy"))
    assert (reply.policy, reply.mechanism) == ("srtf", "greedy")
    status = admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest())
    assert (status.policy, status.mechanism, status.max_job_gpus) == ("srtf", "greedy", 8)
    admin.SetPolicy(admin_pb2.SetPolicyRequest(policy="fifo", mechanism="tune"))


def test_jobs_carry_their_gpu_proportional_share(tmp_path, start_agent) -> None:
    """DescribeJob and ListJobs say what a GPU-proportional scheduler would give the job (the
    demo's summary compares each job's allocation with it): the smallest per-GPU share of any
    GPU node, times the job's GPUs; nothing for a CPU-only job or before a GPU node exists."""
    d = DaemonProcess(tmp_path / "state", round_s=0.3).start()
    a = d.admin()
    try:
        early = a.submit("early", gpus=1)
        assert not early.HasField("proportional_share")
        start_agent(d, "big", gpus=4, cpus=24, mem_gb=256)     # 6 CPUs and 64 GB per GPU
        start_agent(d, "small", gpus=2, cpus=8, mem_gb=64)     # 4 CPUs and 32 GB per GPU: the smaller
        a.submit("pair", gpus=2)
        a.SubmitJob(admin_pb2.SubmitJobRequest(spec=admin_pb2.JobSpec(
            name="prep", kind="cpu", cpus_hint=1, mem_gb_hint=1, command=["python", "prep.py"])))
        share = a.describe("pair").proportional_share
        assert (share.gpus, share.cpus, share.mem_gb) == (2, 8, 64)
        assert a.describe("early").proportional_share.cpus == 4
        assert not a.describe("prep").HasField("proportional_share")
        listed = {j.name: j for j in a.jobs()}
        assert listed["pair"].proportional_share.mem_gb == 64
        assert not listed["prep"].HasField("proportional_share")
    finally:
        a.close()
        d.kill()
