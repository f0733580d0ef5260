"""Issue 16, the agent's side: a root agent runs each job as its Unix user.

Real Unix users made here with `useradd` (removed afterwards), a real synergyd and a real
synergy-agent with real cgroups; the jobs are real processes that try, as an unfriendly user
would, to read what is not theirs and to leave their cgroups. Every rule here failed before
issue 16 (every job ran as the agent's user, root): its uid, the reads, the cgroup escape,
the other job's token, the unknown user (which ran as root).

Paths the jobs try live in a world-traversable dir (not pytest's root-only tmp dir), so what
stops a job is the rule under test, not an ancestor it cannot enter.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from agent_harness import AgentProcess, is_root_with_v1
from synergyd_harness import DaemonProcess, wait_for

pytestmark = pytest.mark.skipif(
    not is_root_with_v1() or shutil.which("useradd") is None,
    reason="needs root (to make Unix users with useradd and to switch to them) and cgroup v1 "
    "cpuset/memory/cpu; CI runs as root. The non-root fallback is tested by starting the agent as a plain user",
)

#: a job's interpreter every user may run (the test's virtualenv may sit where they cannot)
PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

#: What a job tries, as told by a JSON plan in argv[1]; it prints what it found as `PROBE {json}`.
PROBE = r"""
import errno, json, os, sys
plan = json.loads(sys.argv[1])
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
def read(p):
    if os.path.isdir(p):
        os.listdir(p)
    else:
        with open(p, "rb") as f:
            f.read()
def write(p, data):
    with open(p, "w") as f:
        f.write(data)
um = os.umask(0o077)
out = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
       "env": {k: os.environ.get(k, "") for k in ("HOME", "USER", "LOGNAME")}, "cwd": os.getcwd(), "umask": um,
       "read": {p: attempt(lambda p=p: read(p)) for p in plan.get("read", [])},
       "write": {p: attempt(lambda p=p: write(p, d)) for p, d in plan.get("write", {}).items()}}
if plan.get("make"):
    write(plan["make"], "x")
    out["made"] = os.stat(plan["make"]).st_mode & 0o777
if plan.get("escape"):
    me = str(os.getpid())
    mine = [l.split(":", 2)[2] for l in open("/proc/self/cgroup").read().splitlines() if ":memory:" in l][0]
    out["raise_limit"] = attempt(lambda: write(f"/sys/fs/cgroup/memory{mine}/memory.limit_in_bytes", "-1"))
    out["escape"] = {c: attempt(lambda c=c: write(f"/sys/fs/cgroup/{c}/cgroup.procs", me))
                     for c in ("memory", "cpuset", "pids") if os.path.exists(f"/sys/fs/cgroup/{c}/cgroup.procs")}
    out["cgroups"] = open("/proc/self/cgroup").read()
print("PROBE " + json.dumps(out), flush=True)
"""

#: bob's job: writes its checkpoint (as a job does), prints its pid, sleeps.
BOB = r"""
import os, time
d = os.environ["SYNERGY_CHECKPOINT_DIR"]
os.makedirs(d, exist_ok=True)
with open(os.path.join(d, "model.pt"), "w") as f:
    f.write("weights")
print("PID", os.getpid(), flush=True)
time.sleep(600)
"""


@dataclass
class User:
    name: str
    uid: int
    gid: int
    home: Path


def _useradd(name: str, home: Path, group: str = "") -> User:
    extra = ["-G", group] if group else []
    subprocess.run(["useradd", "-m", "-d", str(home), "-s", "/bin/sh", *extra, name], check=True,
                   capture_output=True)
    out = subprocess.run(["id", "-u", name], check=True, capture_output=True, text=True).stdout
    gid = subprocess.run(["id", "-g", name], check=True, capture_output=True, text=True).stdout
    return User(name, int(out), int(gid), home)


@dataclass
class Node:
    shared: Path
    daemon: DaemonProcess
    agent: AgentProcess
    alice: User
    bob: User
    group_gid: int

    def submit(self, name: str, user: str, code: str, *args: str, **kw: object) -> int:
        admin = self.daemon.admin()
        try:
            return admin.submit(name, gpus=1, command=(PY, "-I", "-c", code, *args), user=user, **kw).id
        finally:
            admin.close()

    def wait(self, job: int, want: str, timeout: float = 60) -> object:
        admin = self.daemon.admin()
        try:
            wait_for(lambda: admin.state(job) in (want, "failed", "succeeded"), timeout=timeout,
                     what=f"job {job} to be {want}")
            info = admin.describe(job)
            assert admin.state(job) == want, (f"job {job} is {admin.state(job)}: {info.state_reason}\n"
                                              f"{self.agent.log_text()[-3000:]}")
            return info
        finally:
            admin.close()

    def probe(self, user: str, plan: dict[str, object], **kw: object) -> dict[str, object]:
        job = self.submit(f"probe-{uuid.uuid4().hex[:6]}", user, PROBE, json.dumps(plan), **kw)
        self.wait(job, "succeeded")
        found = re.search(r"^PROBE (.*)$", self.agent.task_log(job), re.M)
        assert found, self.agent.task_log(job)
        result: dict[str, object] = json.loads(found.group(1))
        result["job"] = job
        return result

    def cancel(self, job: int) -> None:
        from synergy.v1 import admin_pb2

        admin = self.daemon.admin()
        try:
            admin.CancelJob(admin_pb2.CancelJobRequest(job=str(job)))
        finally:
            admin.close()


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    tag = uuid.uuid4().hex[:6]
    shared = Path(tempfile.mkdtemp(prefix="synergy-users-"))
    os.chmod(shared, 0o755)
    (shared / "ckpt").mkdir(mode=0o1777)
    os.chmod(shared / "ckpt", 0o1777)  # a shared scratch, as /scratch is
    group = f"syng{tag}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    users: list[str] = []
    daemon = agent = None
    try:
        alice = _useradd(f"synalice{tag}", shared / "home-alice", group)
        users.append(alice.name)
        bob = _useradd(f"synbob{tag}", shared / "home-bob")
        users.append(bob.name)
        work = shared / "work"
        work.mkdir(mode=0o755)  # as an admin's mkdir leaves it: the agent must tighten it
        os.chmod(work, 0o755)
        daemon = DaemonProcess(shared / "state", "--launch-timeout-s", "600").start()
        agent = AgentProcess(daemon, work, "users0", "--cpus", "0-1", "--memory", "2G", fake_gpus=2,
                             job_users=True).start()
        yield Node(shared, daemon, agent, alice, bob, int(subprocess.run(
            ["getent", "group", group], check=True, capture_output=True, text=True).stdout.split(":")[2]))
    finally:
        if agent is not None:
            agent.stop()
        if daemon is not None:
            daemon.kill()
        for name in users:
            subprocess.run(["userdel", "-r", "-f", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture(scope="module")
def bobs_job(node: Node) -> Iterator[tuple[int, int]]:
    """bob's running job (id, pid), its checkpoint written in shared/ckpt/bob."""
    job = node.submit("bobs", node.bob.name, BOB, checkpoint_dir=str(node.shared / "ckpt" / "bob"))
    node.wait(job, "running")
    pid = node.agent.task_pid(job)
    yield job, pid
    node.cancel(job)


def test_a_job_runs_as_its_user_with_its_groups_home_and_umask(node: Node) -> None:
    alice = node.alice
    got = node.probe(alice.name, {"make": "made-by-job"})
    assert (got["uid"], got["euid"], got["gid"]) == (alice.uid, alice.uid, alice.gid), got
    assert node.group_gid in got["groups"] and 0 not in got["groups"], got  # supplementary groups, not root's
    assert got["env"] == {"HOME": str(alice.home), "USER": alice.name, "LOGNAME": alice.name}, got
    assert got["cwd"] == str(alice.home) and got["umask"] == 0o077 and got["made"] == 0o600, got
    made = alice.home / "made-by-job"
    assert (made.stat().st_uid, made.stat().st_gid) == (alice.uid, alice.gid)
    log = node.agent.work_dir / "logs" / f"{got['job']}-1-0.log"  # its log is alice's too, hers alone
    assert (log.stat().st_uid, stat.S_IMODE(log.stat().st_mode)) == (alice.uid, 0o600)
    assert re.search(rf"task\.launched.*user={alice.name}", node.agent.log_text()), node.agent.log_text()[-2000:]


def test_a_job_cannot_read_another_users_checkpoints_nor_the_agents_work_dir_and_tokens(
        node: Node, bobs_job: tuple[int, int]) -> None:
    bob_ckpt = node.shared / "ckpt" / "bob"
    assert (bob_ckpt.stat().st_uid, stat.S_IMODE(bob_ckpt.stat().st_mode)) == (node.bob.uid, 0o700)
    work, state = node.agent.work_dir, node.daemon.state_dir
    secrets = [bob_ckpt, bob_ckpt / "model.pt", work, work / "state.json", work / "instance.id",
               work / "logs" / f"{bobs_job[0]}-1-0.log", state, state / "admin.token", state / "cluster.token"]
    forged = work / "exits" / f"{bobs_job[0]}-1-0.exit"  # what would let a job report another's exit
    got = node.probe(node.alice.name, {"read": [str(p) for p in secrets], "write": {str(forged): "0\n"}})
    assert got["read"] == {str(p): "EACCES" for p in secrets}, got
    assert got["write"] == {str(forged): "EACCES"}, got
    assert stat.S_IMODE(work.stat().st_mode) == 0o700  # the agent tightened the 0755 it was given
    assert "agent.work_dir_tightened" in node.agent.log_text()


def test_a_job_cannot_read_another_jobs_token_from_proc(node: Node, bobs_job: tuple[int, int]) -> None:
    _, bob_pid = bobs_job
    shim_pid = psutil.Process(bob_pid).ppid()  # the shim that parents bob's job holds the token too
    assert f"SYNERGY_JOB_TOKEN=".encode() in Path(f"/proc/{bob_pid}/environ").read_bytes()
    paths = [f"/proc/{bob_pid}/environ", f"/proc/{shim_pid}/environ"]
    got = node.probe(node.alice.name, {"read": paths})
    assert got["read"] == dict.fromkeys(paths, "EACCES"), got
    mine = node.probe(node.bob.name, {"read": [f"/proc/{bob_pid}/environ"]})  # its own user may: same uid
    assert mine["read"] == {f"/proc/{bob_pid}/environ": "ok"}, mine


def test_a_job_cannot_move_itself_out_of_its_cgroups_nor_raise_its_limit(node: Node) -> None:
    got = node.probe(node.alice.name, {"escape": True})
    mounted = [c for c in ("memory", "cpuset", "pids") if Path(f"/sys/fs/cgroup/{c}/cgroup.procs").exists()]
    assert got["escape"] == dict.fromkeys(mounted, "EACCES"), got
    assert got["raise_limit"] == "EACCES", got
    task = f"job{got['job']}-a1-r0"
    for controller in mounted:
        line = next(line for line in str(got["cgroups"]).splitlines() if f":{controller}:" in line
                    or f",{controller}:" in line or f":{controller}," in line)
        assert line.endswith(f"/{task}"), got["cgroups"]


def test_an_unknown_user_fails_the_job_with_a_reason_naming_user_and_node(node: Node) -> None:
    ghost = f"nosuch{uuid.uuid4().hex[:6]}"
    job = node.submit("ghost", ghost, "print('ran')")
    info = node.wait(job, "failed")
    reason = info.state_reason  # type: ignore[attr-defined]
    assert f"user {ghost!r} is not known on node users0" in reason, reason
    assert "ran" not in node.agent.task_log(job)


def test_root_and_the_default_user(node: Node) -> None:
    job = node.submit("as-root", "root", "print('ran')")  # refused without --allow-root-jobs
    info = node.wait(job, "failed")
    assert "would run as root (uid 0) on node users0" in info.state_reason, info  # type: ignore[attr-defined]
    assert "--allow-root-jobs" in info.state_reason  # type: ignore[attr-defined]
    got = node.probe("", {})  # no user: --default-user, nobody; no home, so /tmp
    nobody = int(subprocess.run(["id", "-u", "nobody"], check=True, capture_output=True, text=True).stdout)
    assert (got["uid"], got["env"]["USER"], got["cwd"]) == (nobody, "nobody", "/tmp"), got  # type: ignore[index]


def test_a_working_dir_the_user_cannot_enter_fails_the_launch(node: Node) -> None:
    closed = node.shared / "closed"
    closed.mkdir(mode=0o700, exist_ok=True)
    job = node.submit("closed", node.alice.name, "print('ran')", working_dir=str(closed))
    info = node.wait(job, "failed")
    reason = info.state_reason  # type: ignore[attr-defined]
    assert f"launch failed: cannot switch to the job's user: working dir {closed}: Permission denied" in reason, reason


def _launcher_for(user: str) -> tuple[str, ...]:
    """How `user` can start the agent: this interpreter, or (when it lives where a plain user
    cannot go, e.g. under /root) the system's Python of the same version with our site dir."""
    probe = "import synergy.agent.main"
    try:
        if subprocess.run([sys.executable, "-c", probe], user=user, capture_output=True).returncode == 0:
            return (sys.executable, "-m", "synergy.agent.main")
    except PermissionError:
        pass
    site_dir = next(p for p in sys.path if p.endswith("site-packages"))
    boot = (f"import runpy, site; site.addsitedir({site_dir!r}); "
            "runpy.run_module('synergy.agent.main', run_name='__main__', alter_sys=True)")
    same = f"import sys; sys.exit(sys.version_info[:2] != {tuple(sys.version_info[:2])!r})"
    try:
        ok = (subprocess.run([PY, "-c", same], user=user).returncode == 0
              and subprocess.run([PY, "-c", f"import site; site.addsitedir({site_dir!r}); {probe}"],
                                 user=user, capture_output=True).returncode == 0)
    except PermissionError:
        ok = False
    if not ok:
        pytest.skip(f"a plain user can run neither {sys.executable} nor a Python {sys.version_info[:2]} with "
                    "this virtualenv's packages here, so no agent can be started as one")
    return (PY, "-c", boot)


def test_a_non_root_agent_says_so_and_runs_jobs_as_itself(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    shared = Path(tempfile.mkdtemp(prefix="synergy-nonroot-"))
    os.chmod(shared, 0o755)
    name = f"synagent{tag}"
    daemon = agent = None
    try:
        me = _useradd(name, shared / "home")
        launcher = _launcher_for(name)
        daemon = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600").start()
        token = shared / "cluster.token"
        token.write_text(daemon.cluster_token)
        os.chown(token, me.uid, me.gid)
        os.chmod(token, 0o600)
        work = shared / "work"
        work.mkdir()
        os.chown(work, me.uid, me.gid)
        agent = AgentProcess(daemon, work / "agent", "plain0", "--no-cgroups", "--cluster-token-file", str(token),
                             job_users=True, unix_user=name, launcher=launcher).start()
        admin = daemon.admin()
        try:
            job = admin.submit("as-agent", gpus=1, command=(PY, "-I", "-c", "import os; print('UID', os.getuid())"),
                               user="someoneelse").id
            wait_for(lambda: admin.state(job) == "succeeded", timeout=60,
                     what=f"the job to succeed ({admin.describe(job).state_reason})")
        finally:
            admin.close()
        assert f"UID {me.uid}" in agent.task_log(job)
        said = [line for line in agent.log_text().splitlines() if "agent.job_users" in line]
        assert len(said) == 1 and f"the agent is not root (uid {me.uid}, {name})" in said[0], agent.log_text()
    finally:
        if agent is not None:
            agent.stop()
        if daemon is not None:
            daemon.kill()
        subprocess.run(["userdel", "-r", "-f", name], capture_output=True)
        shutil.rmtree(shared, ignore_errors=True)
