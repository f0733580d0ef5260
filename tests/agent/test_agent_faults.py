"""synergy-agent under faults (issue 15): real synergyd, real agents, real cgroup v1 groups.

Each test reproduces one defect the adversarial run found and fails on the code before its fix.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from agent_harness import AgentProcess, alive, cpus_allowed, is_root_with_v1
from synergyd_harness import DaemonProcess, wait_for
from synergy.v1 import admin_pb2, common_pb2

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the cgroup layer is unit-tested without")

SLEEPER = "import os, time; print('PID', os.getpid(), flush=True); time.sleep(600)"
V1 = Path("/sys/fs/cgroup")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., object]]:
    daemons: list[DaemonProcess] = []
    agents: list[AgentProcess] = []

    def daemon() -> DaemonProcess:
        d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600").start()
        daemons.append(d)
        return d

    def agent(d: DaemonProcess, node_id: str, *extra: str, work: str | Path = "", start: bool = True,
              fake_gpus: int = 2) -> AgentProcess:
        a = AgentProcess(d, tmp_path / (work or f"work-{node_id}"), node_id, *extra, fake_gpus=fake_gpus)
        if isinstance(work, Path):  # a test's own mount: the harness's log goes beside it
            a.log_path = tmp_path / f"agent-{node_id}.log"
        agents.append(a)
        return a.start() if start else a

    yield lambda kind, *a, **kw: daemon() if kind == "daemon" else agent(*a, **kw)
    for a in agents:
        a.stop()
        a.remove_cgroups()
    for d in daemons:
        d.kill()


def _submit(d: DaemonProcess, name: str, tmp: Path, code: str = SLEEPER, **kw: object) -> int:
    admin = d.admin()
    try:
        return admin.submit(name, gpus=1, command=(sys.executable, "-u", "-c", code), working_dir=str(tmp),
                            **kw).id
    finally:
        admin.close()


def _wait_state(d: DaemonProcess, job: int, want: str, timeout: float = 60) -> None:
    admin = d.admin()
    try:
        wait_for(lambda: admin.state(job) == want, timeout=timeout,
                 what=f"job {job} to be {want} (is {admin.state(job)}: {admin.describe(job).state_reason})")
    finally:
        admin.close()


def test_a_refused_duplicate_agent_touches_nothing_of_the_node(cluster: Callable[..., object],
                                                               tmp_path: Path) -> None:
    """Defect 1: the duplicate removed the live agent's groups before RegisterNode refused it."""
    d = cluster("daemon")
    live = cluster("agent", d, "p1", "--cpus", "0", "--memory", "1G", "--sample-interval-s", "0")
    job = _submit(d, "keeps-running", tmp_path)
    _wait_state(d, job, "running")
    pid = live.task_pid(job)
    group = V1 / "memory" / live.cgroup_parent / "p1" / f"job{job}-a1-r0"
    assert group.is_dir()

    dup = cluster("agent", d, "p1", "--cpus", "0", "--memory", "1G", work="work-dup", start=False)
    dup.cgroup_parent = live.cgroup_parent  # the same PARENT/NODE_ID path, as on the same host
    out = subprocess.run(dup.argv(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "owned by another live agent" in out.stderr, out.stderr

    assert alive(pid) and group.is_dir(), "the refused agent touched the live agent's task"
    assert pid in [int(p) for p in (group / "cgroup.procs").read_text().split()]
    _wait_state(d, job, "running")
    second = _submit(d, "launches-fine", tmp_path)  # the live agent still launches into its groups
    _wait_state(d, second, "running")
    assert live.task_pid(second) and "task.launch_failed" not in live.log_text(), live.log_text()


def test_a_changed_cpus_after_a_crash_keeps_cgroups_and_moves_the_readopted_task(
        cluster: Callable[..., object], tmp_path: Path) -> None:
    """Defect 2: the dead instance's group made cpuset.cpus EBUSY and the agent fell to kind=none."""
    d = cluster("daemon")
    a = cluster("agent", d, "shrink", "--cpus", "0-1", "--memory", "1G", "--sample-interval-s", "0")
    dead = _submit(d, "dies-with-agent", tmp_path)
    kept = _submit(d, "survives", tmp_path)
    _wait_state(d, dead, "running")
    _wait_state(d, kept, "running")
    dead_pid, kept_pid = a.task_pid(dead), a.task_pid(kept)
    kept_core = cpus_allowed(kept_pid)
    a.kill9()
    subprocess.run(["kill", "-9", str(dead_pid)], check=True)  # one task dies with it; its group stays
    wait_for(lambda: not alive(dead_pid), timeout=10, what="the killed task to die")
    # Restart on one core only: the one the surviving task does *not* hold, so it must move.
    new_core = "1" if kept_core == "0" else "0"
    a.extra = [x if x != "0-1" else new_core for x in a.extra]
    seen = a.log_text().count("agent.cgroups kind=")  # the first instance's line, if the log is kept
    a.start()
    # `agent.cgroups` is logged once the node group is narrowed, after `task.moved`.
    wait_for(lambda: a.log_text().count("agent.cgroups kind=") > seen and "task.moved" in a.log_text(), timeout=30,
             what="the agent to take the node over")
    text = a.log_text()
    assert "agent.cgroups kind=v1" in text and "kind=none" not in text, text
    assert alive(kept_pid) and cpus_allowed(kept_pid) == new_core, text
    node_group = V1 / "cpuset" / a.cgroup_parent / "shrink"
    assert (node_group / "cpuset.cpus").read_text().strip() == new_core
    assert not (node_group / f"job{dead}-a1-r0").exists(), "the dead task's stale group was left"
    assert f"job{kept}-a1-r0" in Path(f"/proc/{kept_pid}/cgroup").read_text()


def test_unusable_cgroups_refuse_to_start_unless_allowed(cluster: Callable[..., object], tmp_path: Path) -> None:
    """Defect 2: a cgroup that cannot be set up is never a silent fall to 'memory not enforced'."""
    d = cluster("daemon")
    a = cluster("agent", d, "broken", "--cpus", "0", "--memory", "1G", start=False)
    # The node group has a child that is no task of ours, with a process, on another core than
    # the slice's: the node group's cpuset cannot be narrowed to the slice (EBUSY).
    top = V1 / "cpuset" / a.cgroup_parent
    top.mkdir()
    try:
        blocker = top / "broken"
        blocker.mkdir()
        (blocker / "other").mkdir()  # a busy child holding other cpus than the slice's
        mems = (V1 / "cpuset" / "cpuset.mems").read_text().strip()
        for g, cpus in ((top, "0-1"), (blocker, "0-1"), (blocker / "other", "1")):
            (g / "cpuset.mems").write_text(mems)
            (g / "cpuset.cpus").write_text(cpus)
        holder = subprocess.Popen(["sleep", "600"])
        try:
            (blocker / "other" / "cgroup.procs").write_text(str(holder.pid))
            out = subprocess.run(a.argv(), capture_output=True, text=True, timeout=60)
            assert out.returncode == 1 and "--allow-unenforced" in out.stderr, out.stderr
            assert "could not be set up" in out.stderr
            assert alive(holder.pid)  # not a task group of ours: left alone
            a.extra.append("--allow-unenforced")
            a.start()
            wait_for(lambda: "agent.cgroups kind=none" in a.log_text(), timeout=30, what="the agent to go on")
            assert "agent.cgroups_unusable" in a.log_text()
            admin = d.admin()
            try:
                wait_for(lambda: [(n.cgroup_mode, n.memory_enforced) for n in admin.ListNodes(
                    admin_pb2.ListNodesRequest()).nodes] == [("none", False)], timeout=30,
                    what="the node to be registered without cgroups")
            finally:
                admin.close()
            a.stop()
        finally:
            holder.kill()
            holder.wait()
    finally:
        for p in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if p.is_dir():
                p.rmdir()
        top.rmdir()


FORKER = ("import os, time; print('PID', os.getpid(), flush=True)\n"
          "made = 0\n"
          "try:\n"
          "    for _ in range(200):\n"
          "        if os.fork() == 0:\n"
          "            time.sleep(600)\n"
          "            os._exit(0)\n"
          "        made += 1\n"
          "except OSError as exc:\n"
          "    print('fork refused after', made, type(exc).__name__, flush=True)\n"
          "print('forked', made, flush=True)\n"
          "time.sleep(600)\n")


def test_a_task_cannot_fork_past_its_pids_limit(cluster: Callable[..., object], tmp_path: Path) -> None:
    """Defect 6: 2,000 forks were accepted; the pids controller now caps each task."""
    if not (V1 / "pids").is_dir():
        pytest.skip("the cgroup v1 pids controller is not mounted")
    d = cluster("daemon")
    a = cluster("agent", d, "forky", "--cpus", "0", "--memory", "1G", "--task-pids-max", "50",
                "--sample-interval-s", "0")
    job = _submit(d, "forker", tmp_path, code=FORKER)
    _wait_state(d, job, "running")
    # A whole line: the task runs `python -u`, so print's pieces reach the log one by
    # one, and "forked" was once read before its count.
    forked = wait_for(lambda: re.search(r"^forked (\d+)\n", a.task_log(job), re.M),
                      timeout=60, what="the forker to finish forking")
    assert "fork refused after" in a.task_log(job), a.task_log(job)
    assert int(forked.group(1)) < 50
    limit = V1 / "pids" / a.cgroup_parent / "forky" / f"job{job}-a1-r0" / "pids.max"
    assert limit.read_text().strip() == "50"


def test_a_clean_stop_leaves_no_empty_parent_group(cluster: Callable[..., object], tmp_path: Path) -> None:
    """Defect 6: the parent cgroup was left after a clean stop."""
    d = cluster("daemon")
    a = cluster("agent", d, "tidy", "--cpus", "0", "--memory", "1G", "--sample-interval-s", "0")
    job = _submit(d, "short", tmp_path)
    _wait_state(d, job, "running")
    a.stop()
    left = [c for c in ("cpuset", "memory", "cpu", "pids") if (V1 / c / a.cgroup_parent).exists()]
    assert not left, f"groups left under {a.cgroup_parent} in {left}"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 50 MB tmpfs, mounted for the test (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=50m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


FLOOD = ("import os, sys; print('PID', os.getpid(), flush=True)\n"
         "line = 'x' * 1023 + '\\n'\n"
         "for _ in range({n}):\n    sys.stdout.write(line)\n"
         "sys.stdout.flush(); print('flood done', flush=True)\n")
WAIT_FOR_GO = ("import os, pathlib, time; print('PID', os.getpid(), flush=True)\n"
               "while not pathlib.Path('go').exists(): time.sleep(0.1)\n")


def _node(d: DaemonProcess, node_id: str) -> admin_pb2.NodeInfo:
    admin = d.admin()
    try:
        (node,) = [n for n in admin.ListNodes(admin_pb2.ListNodesRequest()).nodes if n.node_id == node_id]
        return node
    finally:
        admin.close()


def test_a_full_work_dir_is_no_black_hole(cluster: Callable[..., object], tmp_path: Path, small_disk: Path) -> None:
    """Defect 3: a job printing 100 MB into a 50 MB work dir made it, its neighbour and every
    later job end 'lost' (exit 255), the node still ready."""
    d = cluster("daemon")
    a = cluster("agent", d, "tiny", "--cpus", "0", "--memory", "1G", "--sample-interval-s", "0",
                work=small_disk / "work")  # the default log cap (100M) is more than the disk
    calm = _submit(d, "beside", tmp_path, code=WAIT_FOR_GO)
    _wait_state(d, calm, "running")
    flood = _submit(d, "flood", tmp_path, code=FLOOD.format(n=100 * 1024))
    _wait_state(d, flood, "succeeded", timeout=120)  # its output was dropped, its exit kept
    wait_for(lambda: "not ready: work dir" in _node(d, "tiny").state_reason, timeout=30,
             what="the node to say its work dir is full")
    assert _node(d, "tiny").state == common_pb2.NODE_STATE_CORDONED
    later = _submit(d, "later", tmp_path)
    (tmp_path / "go").write_text("")
    _wait_state(d, calm, "succeeded")  # exited 0 beside a full disk: recorded as such
    admin = d.admin()
    try:
        assert admin.state(later) == "queued"  # not sent to a node with no room
    finally:
        admin.close()
    assert "lost" not in a.log_text()
    (a.work_dir / "logs" / f"{flood}-1-0.log").unlink()  # room again: the node takes tasks again
    _wait_state(d, later, "running")
    assert _node(d, "tiny").state == common_pb2.NODE_STATE_READY


def test_a_task_log_is_capped_and_rotated_with_a_line_saying_so(cluster: Callable[..., object],
                                                                  tmp_path: Path) -> None:
    """Defect 3: a task's log had no cap (it is rotated at --task-log-max, keeping --task-log-files)."""
    d = cluster("daemon")
    a = cluster("agent", d, "capped", "--cpus", "0", "--memory", "1G", "--sample-interval-s", "0",
                "--task-log-max", "1M", "--task-log-files", "1")
    job = _submit(d, "chatty", tmp_path, code=FLOOD.format(n=5 * 1024))
    _wait_state(d, job, "succeeded", timeout=120)
    log = a.work_dir / "logs" / f"{job}-1-0.log"
    older = log.with_name(log.name + ".1")
    assert log.stat().st_size <= 1024**2 and older.stat().st_size <= 1024**2
    assert not log.with_name(log.name + ".2").exists()
    text = log.read_text()
    assert text.startswith("[synergy: log reached its cap of 1048576 bytes; earlier output in "), text[:200]
    assert text.rstrip().endswith("flood done")


def test_a_plaintext_agent_names_the_tls_problem(tmp_path: Path) -> None:
    """Defect 7: a plaintext agent against a TLS synergyd logged `code=UNAVAILABLE` forever,
    where the CLI says the daemon speaks TLS; the agent now says it the same way."""
    from pki import make_pki

    pki = tmp_path / "pki"
    pki.mkdir()
    make_pki(pki)
    d = DaemonProcess(tmp_path / "state", "--tls-cert", str(pki / "server.pem"), "--tls-key",
                      str(pki / "server.key")).start()
    a = AgentProcess(d, tmp_path / "work", "plain", "--cpus", "0", "--memory", "1G")
    try:
        a.proc = subprocess.Popen(a.argv(), stdout=subprocess.DEVNULL, stderr=open(a.log_path, "ab"))
        wait_for(lambda: "agent.daemon_unreachable" in a.log_text(), timeout=30, what="the agent to retry")
        assert f"synergyd at {d.address} speaks TLS: pass --tls-ca FILE" in a.log_text(), a.log_text()
    finally:
        a.stop()
        d.kill()


#: A job that talks gRPC and then forks, the way DataLoader workers start at every epoch while
#: the iterator's lease channel is live (the image example logged gRPC's fork warning each epoch).
FORKS_UNDER_GRPC = ("import os, grpc\n"
                    "print('GRPC_VERBOSITY', os.environ.get('GRPC_VERBOSITY', '-'), flush=True)\n"
                    "from grpc_health.v1 import health_pb2, health_pb2_grpc\n"
                    "stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(os.environ['SYNERGY_DAEMON_ADDRESS']))\n"
                    "for _ in range(8):\n"
                    "    stub.Check(health_pb2.HealthCheckRequest(), timeout=10)\n"
                    "    pid = os.fork()\n"
                    "    if pid == 0:\n        os._exit(0)\n"
                    "    os.waitpid(pid, 0)\n"
                    "print('forked 8', flush=True)\n")
FORK_WARNING = "FD from fork parent"


def test_no_grpc_fork_warning_from_a_launch_or_a_job_that_forks(cluster: Callable[..., object],
                                                                  tmp_path: Path) -> None:
    """Defect 7: gRPC's `FD from fork parent still in poll list` filled the image example's log
    (the `poll` strategy the agent set for jobs logs it in every child forked beside a live channel).
    Neither the agent (it spawns shims while its own channel is open) nor the job may print it."""
    d = cluster("daemon")
    a = cluster("agent", d, "forks", "--cpus", "0", "--memory", "1G", "--sample-interval-s", "0")
    job = _submit(d, "forks-under-grpc", tmp_path, code=FORKS_UNDER_GRPC)
    _wait_state(d, job, "succeeded")
    assert "forked 8" in a.task_log(job), a.task_log(job)
    assert "GRPC_VERBOSITY -" in a.task_log(job), "the agent handed its gRPC settings to the job"
    assert FORK_WARNING not in a.task_log(job), a.task_log(job)
    assert "task.launched" in a.log_text() and FORK_WARNING not in a.log_text(), a.log_text()


def test_a_tls_agent_against_a_plaintext_daemon_logs_no_grpc_lines(tmp_path: Path) -> None:
    """The agent's stderr is its structured log: gRPC's own `ssl_transport_security.cc ...
    Handshake failed` lines at every retry broke it (they were hidden only while the agent
    loaded the CLI package, which silenced gRPC for the agent and every job alike)."""
    from pki import make_pki

    pki = tmp_path / "pki"
    pki.mkdir()
    make_pki(pki)
    d = DaemonProcess(tmp_path / "state").start()
    a = AgentProcess(d, tmp_path / "work", "tlsagent", "--cpus", "0", "--memory", "1G", "--tls-ca", str(pki / "ca.pem"))
    env = {k: v for k, v in os.environ.items() if k not in ("GRPC_VERBOSITY", "GRPC_TRACE")}
    try:
        a.proc = subprocess.Popen(a.argv(), stdout=subprocess.DEVNULL, stderr=open(a.log_path, "ab"), env=env)
        wait_for(lambda: a.log_text().count("agent.daemon_unreachable") >= 2, timeout=30, what="the agent to retry")
        text = a.log_text()
        assert "did not complete a TLS handshake" in text, text
        foreign = [line for line in text.splitlines() if re.match(r"[DIWEF]\d{4} ", line)]
        assert not foreign, foreign[:3]
    finally:
        a.stop()
        d.kill()
