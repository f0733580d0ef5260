"""Random and malformed requests against a live synergyd: it stays up and loses no job.

Every answer must be a deliberate one (OK or a client-error status); INTERNAL or UNKNOWN
would mean a request reached code that did not expect it.
"""

from __future__ import annotations

import re
import urllib.request
from typing import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synergyd_harness import Admin, DaemonProcess, channel, md, wait_for
from synergy.v1 import admin_pb2, common_pb2, job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc

DELIBERATE = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
METHODS = {
    "/synergy.v1.AdminService/SubmitJob": "admin",
    "/synergy.v1.AdminService/DescribeJob": "admin",
    "/synergy.v1.AdminService/CancelJob": "admin",
    "/synergy.v1.AdminService/ListJobs": "admin",
    "/synergy.v1.AdminService/CordonNode": "admin",
    "/synergy.v1.AdminService/DrainNode": "admin",
    "/synergy.v1.AdminService/LoanNodes": "admin",
    "/synergy.v1.AdminService/ReclaimNodes": "admin",
    "/synergy.v1.AdminService/SetPolicy": "admin",
    "/synergy.v1.NodeService/RegisterNode": "cluster",
    "/synergy.v1.NodeService/Heartbeat": "cluster",
}
#: JobService methods are fuzzed with a real job token (test_malformed_bytes_with_a_job_token):
#: with any other token the bytes stop at authentication and reach no handler.
JOB_METHODS = {
    "RegisterJobProcess": job_pb2.RegisterJobProcessRequest,
    "RenewLease": job_pb2.RenewLeaseRequest,
    "ReportProfile": job_pb2.ReportProfileRequest,
    "ReportCheckpoint": job_pb2.ReportCheckpointRequest,
    "ReportCompletion": job_pb2.ReportCompletionRequest,
}
#: What a call with a valid job token may be answered. Never UNAUTHENTICATED (tokens of
#: ended jobs stay known), never INTERNAL or UNKNOWN.
JOB_ANSWERS = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED,
}
#: synergyd_rpc_errors_total samples, as `(method, code, count)`.
ERROR_SAMPLE = re.compile(r'^synergyd_rpc_errors_total\{code="(\w+)",method="(\w+)"\} ([0-9.e+]+)$', re.M)


class Fuzz:
    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.channel = channel(daemon.address)
        self.tokens = {"admin": daemon.admin_token, "cluster": daemon.cluster_token}
        self.accepted: set[int] = set()
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def call(self, method: str, payload: bytes, token: str) -> grpc.StatusCode:
        rpc = self.channel.unary_unary(method)  # raw bytes in, raw bytes out
        try:
            rpc(payload, metadata=md(token), timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    def submit(self, request: admin_pb2.SubmitJobRequest) -> grpc.StatusCode:
        rpc = self.channel.unary_unary(
            "/synergy.v1.AdminService/SubmitJob",
            request_serializer=admin_pb2.SubmitJobRequest.SerializeToString,
            response_deserializer=admin_pb2.SubmitJobResponse.FromString,
        )
        try:
            reply = rpc(request, metadata=md(self.tokens["admin"]), timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
        self.accepted.add(reply.job.id)
        return grpc.StatusCode.OK

    def rpc_errors(self) -> dict[tuple[str, str], float]:
        """The daemon's own count of error answers, by (method, code), from /metrics."""
        text = urllib.request.urlopen(f"http://{self.daemon.metrics_address}/metrics", timeout=5).read().decode()
        return {(method, code): float(n) for code, method, n in ERROR_SAMPLE.findall(text)}

    def still_up(self) -> None:
        """Alive, serving, and no handler has failed unexpectedly so far (by its metrics)."""
        assert self.daemon.alive(), self.daemon.log_text()[-2000:]
        reply = self.health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        unexpected = {k: n for k, n in self.rpc_errors().items() if k[1] in ("INTERNAL", "UNKNOWN") and n}
        assert not unexpected, (unexpected, self.daemon.log_text()[-4000:])


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzz]:
    d = DaemonProcess(tmp_path_factory.mktemp("fuzz") / "state", "--max-job-gpus", "16", round_s=0.3)
    d.start()
    f = Fuzz(d)
    yield f
    f.channel.close()
    d.kill()


texts = st.text(max_size=80)
floats = st.floats(allow_nan=True, allow_infinity=True)
#: Mostly plausible values, so that many jobs are accepted and then scheduled, with the odd
#: extreme one mixed in.
sane_floats = st.one_of(st.just(0.0), st.floats(0, 512), floats)
wild_specs = st.builds(
    admin_pb2.JobSpec,
    name=st.one_of(st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True), texts),
    command=st.one_of(st.just(["python", "train.py"]), st.lists(texts, max_size=5)),
    working_dir=texts,
    env=st.one_of(st.just({}), st.dictionaries(texts, texts, max_size=4)),
    gpus=st.one_of(st.integers(-2, 20), st.integers(-(2**31), 2**31 - 1)),
    cpus_hint=sane_floats,
    mem_gb_hint=sane_floats,
    model=st.sampled_from(["", "resnet18", "gnmt", "no-such-model"]) | texts,
    task=st.sampled_from(["", "image", "language", "speech", "bogus"]),
    checkpoint_dir=texts,
    priority=st.integers(-(2**31), 2**31 - 1),
    iterations=st.one_of(st.integers(0, 10**6), st.integers(-(2**63), 2**63 - 1)),
    min_gpus=st.just(0) | st.integers(-3, 3),
    max_gpus=st.just(0) | st.integers(-3, 3),
)
#: Valid specs with random content: these are accepted and go on to be scheduled.
valid_specs = st.builds(
    admin_pb2.JobSpec,
    name=st.from_regex(r"[a-z][a-z0-9-]{0,30}", fullmatch=True),
    command=st.lists(
        st.text(min_size=1, max_size=20).filter(lambda a: a.strip() and "\x00" not in a), min_size=1, max_size=4
    ),
    gpus=st.integers(1, 16),
    cpus_hint=st.floats(0, 64),
    mem_gb_hint=st.floats(0, 512),
    model=st.sampled_from(["", "resnet18", "gnmt", "no-such-model"]),
    task=st.sampled_from(["", "image", "language", "speech"]),
    iterations=st.integers(0, 10**6),
)
specs = st.one_of(valid_specs, wild_specs)
SLOW = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SLOW
@given(spec=specs)
def test_random_job_specs(fuzz: Fuzz, spec: admin_pb2.JobSpec) -> None:
    code = fuzz.submit(admin_pb2.SubmitJobRequest(spec=spec))
    assert code in DELIBERATE
    fuzz.still_up()


@SLOW
@given(method=st.sampled_from(sorted(METHODS)), payload=st.binary(max_size=512))
def test_malformed_bytes_to_every_method(fuzz: Fuzz, method: str, payload: bytes) -> None:
    code = fuzz.call(method, payload, fuzz.tokens[METHODS[method]])
    if _undecodable(method, payload):
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert code in DELIBERATE, code
    fuzz.still_up()


def _undecodable(method: str, payload: bytes) -> bool:
    """True when the bytes do not parse as the method's request message."""
    types = {
        "SubmitJob": admin_pb2.SubmitJobRequest,
        "DescribeJob": admin_pb2.DescribeJobRequest,
        "CancelJob": admin_pb2.CancelJobRequest,
        "ListJobs": admin_pb2.ListJobsRequest,
        "CordonNode": admin_pb2.CordonNodeRequest,
        "DrainNode": admin_pb2.DrainNodeRequest,
        "SetPolicy": admin_pb2.SetPolicyRequest,
        "RegisterNode": node_pb2.RegisterNodeRequest,
        "Heartbeat": node_pb2.HeartbeatRequest,
        **JOB_METHODS,
    }
    try:
        types[method.rsplit("/", 1)[1]].FromString(payload)
    except Exception:  # noqa: BLE001
        return True
    return False


resources = st.builds(
    common_pb2.Resources, gpus=st.integers(0, 16).map(float) | floats, cpus=sane_floats, mem_gb=sane_floats
)
task_status = st.builds(
    node_pb2.TaskStatus,
    ref=st.builds(node_pb2.TaskRef, job_id=st.integers(0, 50), attempt=st.integers(0, 3), rank=st.integers(0, 3)),
    state=st.integers(0, 6),
    exit_code=st.integers(-(2**31), 2**31 - 1),
    placement=st.builds(
        common_pb2.Placement, node_id=texts, gpus=st.integers(0, 2**32 - 1), cpus=floats, mem_gb=floats
    ),
)


@SLOW
@given(
    node_id=st.sampled_from(["fz-a", "fz-b"]) | texts,
    capacity=resources,
    reserved=resources,
    tasks=st.lists(task_status, max_size=4),
)
def test_random_agents(fuzz: Fuzz, node_id: str, capacity, reserved, tasks) -> None:
    stub = node_pb2_grpc.NodeServiceStub(fuzz.channel)
    auth = md(fuzz.tokens["cluster"])
    for call, request in (
        (
            stub.RegisterNode,
            node_pb2.RegisterNodeRequest(node_id=node_id, capacity=capacity, reserved=reserved, tasks=tasks),
        ),
        (stub.Heartbeat, node_pb2.HeartbeatRequest(node_id=node_id, tasks=tasks)),
    ):
        try:
            call(request, metadata=auth, timeout=5)
        except grpc.RpcError as exc:
            assert exc.code() in DELIBERATE, (exc.code(), exc.details())
    fuzz.still_up()


@pytest.fixture(scope="module")
def launched(fuzz: Fuzz) -> node_pb2.TaskSpec:
    """A node for the randomly specified jobs (so they go through rounds and launches too),
    and one launched task whose job token the job-side fuzzing uses."""
    stub = node_pb2_grpc.NodeServiceStub(fuzz.channel)
    auth = md(fuzz.tokens["cluster"])
    big = common_pb2.Resources(gpus=16, cpus=64, mem_gb=1024)
    stub.RegisterNode(node_pb2.RegisterNodeRequest(node_id="fz-big", capacity=big), metadata=auth, timeout=5)
    # One job of our own, so this fixture does not depend on which tests ran before it.
    spec = admin_pb2.JobSpec(name="fz-anchor", command=["python", "train.py"], gpus=1)
    assert fuzz.submit(admin_pb2.SubmitJobRequest(spec=spec)) == grpc.StatusCode.OK

    def a_launch() -> node_pb2.TaskSpec | None:
        reply = stub.Heartbeat(node_pb2.HeartbeatRequest(node_id="fz-big"), metadata=auth, timeout=5)
        tasks = [i.task for i in reply.instructions if i.kind == node_pb2.INSTRUCTION_KIND_LAUNCH]
        return tasks[0] if tasks else None

    return wait_for(a_launch, what="a launch")


big_ints = st.one_of(st.integers(0, 5), st.integers(0, 2**64 - 1))
job_floats = st.one_of(st.floats(0, 1000), floats)
profiles_msgs = st.builds(
    common_pb2.SensitivityProfile,
    task=st.sampled_from(["image", "bogus"]),
    cpus_per_gpu=st.lists(job_floats, max_size=4),
    mem_gb_per_gpu=st.lists(job_floats, max_size=4),
    throughput=st.lists(st.builds(common_pb2.ProfileRow, throughput=st.lists(job_floats, max_size=4)), max_size=4),
    reference_cpus_per_gpu=job_floats,
    reference_mem_gb_per_gpu=job_floats,
    iter_time_s=job_floats,
)


@SLOW
@given(
    own=st.booleans(),
    other_id=big_ints,
    attempt=big_ints,
    rank=st.integers(0, 2**32 - 1) | st.integers(0, 2),
    step=big_ints,
    rate=job_floats,
    path=texts,
    outcome=st.integers(0, 4),
    profile=profiles_msgs,
)
def test_random_job_calls(
    fuzz: Fuzz, launched, own, other_id, attempt, rank, step, rate, path, outcome, profile
) -> None:
    stub = job_pb2_grpc.JobServiceStub(fuzz.channel)
    auth = md(launched.job_token)
    job_id = launched.ref.job_id if own else other_id
    calls = [
        (stub.RegisterJobProcess, job_pb2.RegisterJobProcessRequest(job_id=job_id, attempt=attempt, rank=rank)),
        (
            stub.RenewLease,
            job_pb2.RenewLeaseRequest(
                job_id=job_id, attempt=attempt, rank=rank, step=step, samples_per_s=rate, steps_per_s=rate
            ),
        ),
        (stub.ReportCheckpoint, job_pb2.ReportCheckpointRequest(job_id=job_id, attempt=attempt, step=step, path=path)),
        (stub.ReportProfile, job_pb2.ReportProfileRequest(job_id=job_id, profile=profile)),
        (
            stub.ReportCompletion,
            job_pb2.ReportCompletionRequest(job_id=job_id, attempt=attempt, outcome=outcome, step=step),
        ),
    ]
    for call, request in calls:
        try:
            call(request, metadata=auth, timeout=5)
        except grpc.RpcError as exc:
            assert exc.code() in DELIBERATE, (exc.code(), exc.details())
    fuzz.still_up()


def own_requests(task: node_pb2.TaskSpec) -> dict[str, bytes]:
    """A valid request of each JobService method for the launched task, serialised: the
    seeds that the byte-level fuzzing below mutates, so that many mutants still decode and
    name the job the token belongs to, and reach the handlers' logic."""
    ref = task.ref
    profile = common_pb2.SensitivityProfile(
        task="image", cpus_per_gpu=[1, 4], mem_gb_per_gpu=[10, 100],
        throughput=[common_pb2.ProfileRow(throughput=[0.5, 0.6]), common_pb2.ProfileRow(throughput=[0.9, 1.0])],
        reference_cpus_per_gpu=4, reference_mem_gb_per_gpu=100, iter_time_s=0.1,
    )
    requests = {
        "RegisterJobProcess": job_pb2.RegisterJobProcessRequest(
            job_id=ref.job_id, attempt=ref.attempt, rank=ref.rank, world_size=task.world_size,
            node_id="fz-big", hostname="fz-big", pid=4242),
        "RenewLease": job_pb2.RenewLeaseRequest(
            job_id=ref.job_id, attempt=ref.attempt, rank=ref.rank, step=100, samples_per_s=320, steps_per_s=10),
        "ReportProfile": job_pb2.ReportProfileRequest(job_id=ref.job_id, profile=profile),
        "ReportCheckpoint": job_pb2.ReportCheckpointRequest(
            job_id=ref.job_id, attempt=ref.attempt, step=100, path="/ckpt/100"),
        "ReportCompletion": job_pb2.ReportCompletionRequest(
            job_id=ref.job_id, attempt=ref.attempt, outcome=1, step=100, message="done"),
    }
    return {name: r.SerializeToString() for name, r in requests.items()}


def mutate(seed: bytes, edits: list[tuple[int, int, int]], tail: bytes) -> bytes:
    """Apply (kind, position, value) edits: 0 overwrites a byte, 1 inserts one, 2 deletes
    one, 3 truncates there; then append `tail`."""
    data = bytearray(seed)
    for kind, pos, value in edits:
        at = pos % (len(data) + 1)
        if kind == 0 and at < len(data):
            data[at] = value
        elif kind == 1:
            data.insert(at, value)
        elif kind == 2 and at < len(data):
            del data[at]
        elif kind == 3:
            del data[at:]
    return bytes(data) + tail


byte_edits = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1024), st.integers(0, 255)), max_size=6)


@SLOW
@given(
    method=st.sampled_from(sorted(JOB_METHODS)),
    mutated=st.booleans(),
    edits=byte_edits,
    tail=st.binary(max_size=32),
    noise=st.binary(max_size=512),
)
def test_malformed_bytes_with_a_job_token(
    fuzz: Fuzz, launched: node_pb2.TaskSpec, method: str, mutated: bool, edits, tail: bytes, noise: bytes
) -> None:
    """Bytes that pass authentication: the launched job's own token, and payloads that are
    either random or a valid request of that job with bytes overwritten, inserted, deleted,
    truncated or appended."""
    payload = mutate(own_requests(launched)[method], edits, tail) if mutated else noise
    code = fuzz.call(f"/synergy.v1.JobService/{method}", payload, launched.job_token)
    if _undecodable(f"/synergy.v1.JobService/{method}", payload):
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert code in JOB_ANSWERS, code
    fuzz.still_up()


def test_job_token_fuzzing_reaches_the_handlers(fuzz: Fuzz, launched: node_pb2.TaskSpec) -> None:
    """The valid seeds themselves get a handler's answer (not an authentication one), so the
    mutants of them above exercise the handlers and not only the interceptors."""
    for method, payload in own_requests(launched).items():
        code = fuzz.call(f"/synergy.v1.JobService/{method}", payload, launched.job_token)
        assert code in JOB_ANSWERS, (method, code)
    stub = job_pb2_grpc.JobServiceStub(fuzz.channel)
    other = job_pb2.RenewLeaseRequest(job_id=launched.ref.job_id + 10_000, attempt=1, rank=0, step=1)
    with pytest.raises(grpc.RpcError) as denied:
        stub.RenewLease(other, metadata=md(launched.job_token), timeout=5)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert fuzz.rpc_errors().get(("RenewLease", "PERMISSION_DENIED"), 0) >= 1
    fuzz.still_up()


def test_no_accepted_job_was_lost(fuzz: Fuzz, launched) -> None:
    fuzz.still_up()
    admin = Admin(fuzz.daemon.address, fuzz.tokens["admin"])
    ids = {j.id for j in admin.jobs()}
    assert fuzz.accepted <= ids
    admin.close()
    log = fuzz.daemon.log_text()
    assert '"rpc.internal_error"' not in log and '"event.failed"' not in log
