"""Issue 16 (daemon side): many users on one cluster, each known, each kept to their own jobs.

Real Unix users (useradd) call a real synergyd over its Unix socket with the real CLI, run
as those users (tests/unix_users.py): the kernel's peer credentials, not a token or a spec
field, say who they are. Tokens and client certificates are checked over real gRPC.
The tests with Unix users are skipped, saying why, where users cannot be created (not root,
no useradd); the others run anywhere.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import urllib.request
from pathlib import Path
from typing import Iterator

import grpc
import pytest
from cli_runner import run_cli
from pki import make_pki, openssl
from synergyd_harness import CHANNEL_OPTIONS, DaemonProcess, FakeAgent, md, wait_for
from unix_users import UnixUser, add_user, can_make_users, remove_user, synergy_as

from synergy.v1 import admin_pb2, admin_pb2_grpc

GPU_JOB = ["--gpus", "1", "--profiler", "none", "--command", "python train.py"]


@pytest.fixture(scope="module")
def people() -> Iterator[tuple[UnixUser, UnixUser]]:
    """Two real Unix users (skipped, saying why, where they cannot be made)."""
    if can_make_users():
        pytest.skip(can_make_users())
    alice, bob = add_user("alice"), add_user("bob")
    try:
        yield alice, bob
    finally:
        remove_user(alice)
        remove_user(bob)


@pytest.fixture(scope="module")
def socket_dir() -> Iterator[Path]:
    """Where the socket lives: a short path (108-byte limit) that other users may enter
    (pytest's own tmp dirs are root's, mode 0700)."""
    d = Path(tempfile.mkdtemp(prefix="syn16-", dir="/tmp"))
    os.chmod(d, 0o711)
    try:
        yield d
    finally:
        for p in d.iterdir():
            p.unlink()
        d.rmdir()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, socket_dir: Path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path_factory.mktemp("users") / "state", "--unix-socket", str(socket_dir / "s.sock"),
                      "--log-level", "info", round_s=0.5)
    d.start()
    try:
        yield d
    finally:
        d.terminate()


def cli(user: UnixUser | None, daemon: DaemonProcess, *commands: list[str]):
    """Each command as `user` over the daemon's socket, no token (one process for them all)."""
    return synergy_as(user, *(["--socket", daemon.extra[1], *c] for c in commands))


def submitted(run) -> int:
    assert run.code == 0, run.err
    return int(json.loads(run.out)["id"])


def listed(run) -> set[int]:
    assert run.code == 0, run.err
    return {int(j["id"]) for j in json.loads(run.out)["jobs"]}


def stub(address: str) -> admin_pb2_grpc.AdminServiceStub:
    return admin_pb2_grpc.AdminServiceStub(grpc.insecure_channel(address, options=CHANNEL_OPTIONS))


def refused(call, request, token: str | None = None) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=5, metadata=md(token) if token else None)
    return err.value.code(), err.value.details()


# -- the Unix socket: who you are is what the kernel says ------------------------------------------
def test_socket_users_see_and_act_on_only_their_own_jobs(daemon: DaemonProcess, people) -> None:
    alice, bob = people
    me, a1 = cli(alice, daemon, ["whoami", "--json"], ["submit", "--name", f"a1-{alice.name}", *GPU_JOB, "--json"])
    assert me.code == 0 and json.loads(me.out) == {"user": alice.name, "role": "user",
                                                  "via": f"unix socket (uid {alice.uid})"}, me
    a1 = submitted(a1)
    b1, bobs = cli(bob, daemon, ["submit", "--name", f"b1-{bob.name}", *GPU_JOB, "--json"], ["jobs", "--json"])
    b1 = submitted(b1)
    alices, described = cli(alice, daemon, ["jobs", "--json"], ["describe", str(a1), "--json"])
    assert listed(alices) == {a1} and listed(bobs) == {b1}
    assert json.loads(described.out)["spec"]["user"] == alice.name, described

    *job_scoped, everyone, policy = cli(bob, daemon, ["cancel", str(a1)], ["describe", str(a1)], ["logs", str(a1)],
                                        ["jobs", "--all"], ["policy", "set", "--policy", "las"])
    for run in job_scoped:
        assert run.code == 1 and f"permission denied: job {a1} belongs to another user" in run.err, run
    assert everyone.code == 1 and "all_users: only an admin" in everyone.err, everyone
    assert policy.code == 1 and "SetPolicy is for admins" in policy.err, policy

    # root is an admin on the socket: sees both with --all, and cancels both.
    before, every, *cancels, after = cli(None, daemon, ["describe", str(a1), "--json"], ["jobs", "--all", "--json"],
                                         ["cancel", str(a1), "--reason", "maintenance"], ["cancel", str(b1)],
                                         ["describe", str(a1), "--json"])
    assert json.loads(before.out)["state"] == "queued"  # bob's cancel changed nothing
    assert {a1, b1} <= listed(every) and all(c.code == 0 for c in cancels), cancels
    history = json.loads(after.out)["history"]
    assert history[0]["reason"] == f"submitted by {alice.name} via unix socket (uid {alice.uid})"
    assert history[-1]["reason"] == "cancelled by root: maintenance"
    audit = [json.loads(x) for x in daemon.log_text().splitlines() if '"event":"audit"' in x]
    assert any(a["method"] == "CancelJob" and a.get("user") == bob.name and a["outcome"] == "PERMISSION_DENIED"
               and a.get("job") == a1 for a in audit), audit
    assert any(a["method"] == "CancelJob" and a.get("user") == "root" and a["outcome"] == "OK"
               and a.get("job") == a1 for a in audit), audit


def test_a_spec_naming_another_user_is_refused_but_an_admin_may_submit_on_their_behalf(
    daemon: DaemonProcess, people
) -> None:
    alice, bob = people
    (run,) = cli(alice, daemon, ["submit", "--name", f"sneaky-{alice.name}", *GPU_JOB, "--user", bob.name])
    assert run.code == 1 and f"spec.user: {alice.name} may not submit as '{bob.name}'" in run.err, run

    job, every = cli(None, daemon, ["submit", "--name", f"for-{alice.name}", *GPU_JOB, "--user", alice.name, "--json"],
                     ["jobs", "--all", "--json"])
    job = submitted(job)
    assert not any(j["name"] == f"sneaky-{alice.name}" for j in json.loads(every.out)["jobs"])
    mine, described = cli(alice, daemon, ["jobs", "--json"], ["describe", str(job), "--json"])
    assert job in listed(mine)
    info = json.loads(described.out)
    assert info["spec"]["user"] == alice.name
    assert info["history"][0]["reason"] == (
        f"submitted by root (admin) on behalf of {alice.name} via unix socket (uid 0)")


# -- user tokens -----------------------------------------------------------------------------------
def test_user_tokens_are_issued_checked_and_revoked_at_once(daemon: DaemonProcess) -> None:
    admin = stub(daemon.address)
    added = admin.AddUser(admin_pb2.AddUserRequest(name="carol"), timeout=5, metadata=md(daemon.admin_token))
    token = added.token
    assert added.user.role == "user" and added.user.has_token and len(token) >= 40
    assert token not in (Path(daemon.state_dir) / "synergyd.sqlite").read_bytes().decode(errors="replace")
    me = admin.WhoAmI(admin_pb2.WhoAmIRequest(), timeout=5, metadata=md(token))
    assert (me.user, me.role, me.via) == ("carol", "user", "token")

    forged = token[:-4] + ("AAAA" if token[-4:] != "AAAA" else "BBBB")
    for bad in (token[:-1], token[: len(token) // 2], forged, token + "x"):
        assert refused(admin.WhoAmI, admin_pb2.WhoAmIRequest(), bad)[0] == grpc.StatusCode.UNAUTHENTICATED, bad
    code, details = refused(admin.AddUser, admin_pb2.AddUserRequest(name="mallory", role="admin"), token)
    assert code == grpc.StatusCode.PERMISSION_DENIED and "AddUser is for admins" in details
    code, details = refused(admin.AddUser, admin_pb2.AddUserRequest(name="carol"), daemon.admin_token)
    assert code == grpc.StatusCode.ALREADY_EXISTS

    revoked = admin.RevokeUser(admin_pb2.RevokeUserRequest(name="carol"), timeout=5, metadata=md(daemon.admin_token))
    assert revoked.user.revoked_at_unix_s > 0 and revoked.user.revoked_by == "admin"
    code, details = refused(admin.WhoAmI, admin_pb2.WhoAmIRequest(), token)  # the very next call
    assert code == grpc.StatusCode.UNAUTHENTICATED and "revoked" in details
    again = admin.AddUser(admin_pb2.AddUserRequest(name="carol"), timeout=5, metadata=md(daemon.admin_token))
    assert refused(admin.WhoAmI, admin_pb2.WhoAmIRequest(), token)[0] == grpc.StatusCode.UNAUTHENTICATED
    assert admin.WhoAmI(admin_pb2.WhoAmIRequest(), timeout=5, metadata=md(again.token)).user == "carol"


# -- fair shares follow identity ---------------------------------------------------------------------
def test_drf_between_two_authenticated_users_splits_the_cpu_array(daemon: DaemonProcess) -> None:
    """Four CPU jobs each, none naming a user: before identities, each job was its own user
    and FIFO gave alice's four the whole node; now alice's are alice's and DRF halves it."""
    admin = stub(daemon.address)
    tokens = {}
    for name in ("dana", "erin"):
        tokens[name] = admin.AddUser(admin_pb2.AddUserRequest(name=name), timeout=5,
                                     metadata=md(daemon.admin_token)).token
    ids: dict[str, list[int]] = {"dana": [], "erin": []}
    for name in ("dana", "erin"):  # dana's four first: FIFO alone would give her all of it
        for i in range(4):
            spec = admin_pb2.JobSpec(name=f"{name}-cpu{i}", kind="cpu", cpus_hint=0.5, mem_gb_hint=0.25,
                                     command=["python", "work.py"], profiler="none", env={"FAKE_STEP_S": "0.05"},
                                     iterations=1_000_000)
            job = admin.SubmitJob(admin_pb2.SubmitJobRequest(spec=spec), timeout=5, metadata=md(tokens[name])).job
            ids[name].append(job.id)
    node = FakeAgent(daemon.address, daemon.cluster_token, "cpu-node", gpus=0, cpus=2, mem_gb=8).start()
    try:
        def running() -> dict[str, int]:
            jobs = admin.ListJobs(admin_pb2.ListJobsRequest(all_users=True), timeout=5,
                                  metadata=md(daemon.admin_token)).jobs
            live = {j.id for j in jobs if j.placements}
            return {name: len(live & set(i)) for name, i in ids.items()}

        wait_for(lambda: sum(running().values()) == 4, what="the node's two CPUs to fill")
        assert running() == {"dana": 2, "erin": 2}
        jobs = admin.ListJobs(admin_pb2.ListJobsRequest(), timeout=5, metadata=md(tokens["erin"])).jobs
        assert {j.id for j in jobs} == set(ids["erin"]) and {j.spec.user for j in jobs} == {"erin"}
        # The per-user figures of `synergy status` and /metrics go by the same identities.
        status = admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest(), timeout=5, metadata=md(tokens["dana"]))
        per_user = {u.user: (u.running_jobs, u.waiting_jobs, u.allocated.cpus) for u in status.users}
        assert per_user["dana"] == per_user["erin"] == (2, 2, 1.0), per_user
        with urllib.request.urlopen(f"http://{daemon.metrics_address}/metrics", timeout=10) as r:
            scraped = r.read().decode()
        for name in ("dana", "erin"):
            assert f'synergyd_user_jobs{{state="running",user="{name}"}} 2.0' in scraped
            assert f'synergyd_user_allocated_cpus{{user="{name}"}} 1.0' in scraped
    finally:
        node.stop()
        for name, i in ids.items():
            for job in i:
                admin.CancelJob(admin_pb2.CancelJobRequest(job=str(job)), timeout=5, metadata=md(tokens[name]))


# -- client certificates ------------------------------------------------------------------------------
def test_a_client_certificate_names_an_added_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    make_pki(pki)
    for cn in ("frank", "nobody1"):  # frank is added below; nobody1 is not
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{cn}.key", "-out", f"{cn}.csr",
                "-subj", f"/CN={cn}", cwd=pki)
        openssl("x509", "-req", "-in", f"{cn}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{cn}.pem", "-days", "2", cwd=pki)
    d = DaemonProcess(tmp_path / "state", "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                      "--tls-client-ca", str(pki / "ca.pem"), "--unix-socket", "off", round_s=5)
    d.tls_ca = pki / "ca.pem"
    d.start()
    try:
        admin = admin_pb2_grpc.AdminServiceStub(
            grpc.secure_channel(d.address, grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes())))
        admin.AddUser(admin_pb2.AddUserRequest(name="frank", no_token=True), timeout=5, metadata=md(d.admin_token))
        agent_port = (d.state_dir / "agent_address").read_text().strip()

        def as_cert(cn: str) -> admin_pb2_grpc.AdminServiceStub:
            creds = grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes(), (pki / f"{cn}.key").read_bytes(),
                                                 (pki / f"{cn}.pem").read_bytes())
            return admin_pb2_grpc.AdminServiceStub(grpc.secure_channel(agent_port, creds))

        me = as_cert("frank").WhoAmI(admin_pb2.WhoAmIRequest(), timeout=5)
        assert (me.user, me.role, me.via) == ("frank", "user", "client certificate")
        run = run_cli(capsys, "--address", agent_port, "--tls-ca", str(pki / "ca.pem"), "--tls-cert",
                      str(pki / "frank.pem"), "--tls-key", str(pki / "frank.key"), "whoami", "--json")
        assert run.code == 0 and json.loads(run.out)["user"] == "frank", run
        code, details = refused(as_cert("nobody1").WhoAmI, admin_pb2.WhoAmIRequest())
        assert code == grpc.StatusCode.UNAUTHENTICATED and "'nobody1' is no synergy user" in details
        code, details = refused(as_cert("agent").ListJobs, admin_pb2.ListJobsRequest())  # an agent is no user
        assert code == grpc.StatusCode.UNAUTHENTICATED
        code, _ = refused(admin.WhoAmI, admin_pb2.WhoAmIRequest())  # the main port asks for no certificate
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert not (d.state_dir / "synergyd.sock").exists()  # --unix-socket off
    finally:
        d.terminate()


# -- the upgrade path, and users across restarts --------------------------------------------------------
def test_an_old_state_dir_keeps_its_admin_token_and_users_survive_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    d = DaemonProcess(state, round_s=5).start()
    old_token = d.admin_token
    job = stub(d.address).SubmitJob(admin_pb2.SubmitJobRequest(spec=admin_pb2.JobSpec(
        name="old", gpus=1, command=["x"], profiler="none")), timeout=5, metadata=md(old_token)).job.id
    d.terminate()
    with sqlite3.connect(state / "synergyd.sqlite") as db:  # as a state dir from before users existed
        db.execute("DROP TABLE users")
    d.start()
    admin = stub(d.address)
    me = admin.WhoAmI(admin_pb2.WhoAmIRequest(), timeout=5, metadata=md(old_token))
    assert (me.user, me.role) == ("admin", "admin")
    assert job in {j.id for j in admin.ListJobs(admin_pb2.ListJobsRequest(), timeout=5, metadata=md(old_token)).jobs}
    gina = admin.AddUser(admin_pb2.AddUserRequest(name="gina", role="admin"), timeout=5, metadata=md(old_token)).token
    admin.AddUser(admin_pb2.AddUserRequest(name="hal"), timeout=5, metadata=md(old_token))
    admin.RevokeUser(admin_pb2.RevokeUserRequest(name="hal"), timeout=5, metadata=md(gina))
    d.terminate()
    d.start()
    admin = stub(d.address)
    assert admin.WhoAmI(admin_pb2.WhoAmIRequest(), timeout=5, metadata=md(gina)).role == "admin"
    users = {u.name: u for u in admin.ListUsers(admin_pb2.ListUsersRequest(), timeout=5, metadata=md(gina)).users}
    assert set(users) == {"admin", "gina", "hal"} and users["hal"].revoked_by == "gina"
    d.terminate()
