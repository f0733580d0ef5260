"""A real synergyd and real synergy-agent processes running real command jobs (only GPUs are fake).

Jobs here never call the JobService, so the daemon runs with a generous launch timeout.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from agent_harness import AgentProcess, alive, cpus_allowed, is_root_with_v1
from synergyd_harness import DaemonProcess, wait_for
from synergy.v1 import admin_pb2

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the cgroup layer is unit-tested without")

# The test jobs: print their pid first, then do what their name says.
SLEEPER = "import os, time; print('PID', os.getpid(), flush=True); time.sleep(600)"
HOG = ("import os; print('PID', os.getpid(), flush=True); "
       "chunks = [bytearray(64 * 1024 * 1024) for _ in range(24)]; print('survived', flush=True)")
CRASH = "import os, sys; print('PID', os.getpid()); print('boom-marker: bad things'); sys.exit(3)"
TERM_AWARE = ("import os, signal, sys, time; print('PID', os.getpid(), flush=True)\n"
              "def bye(*_):\n    print('got SIGTERM, checkpointing', flush=True); sys.exit(75)\n"
              "signal.signal(signal.SIGTERM, bye); time.sleep(600)")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., object]]:
    daemons: list[DaemonProcess] = []
    agents: list[AgentProcess] = []

    def daemon() -> DaemonProcess:
        d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600").start()
        daemons.append(d)
        return d

    def agent(d: DaemonProcess, node_id: str, *extra: str, fake_gpus: int = 1) -> AgentProcess:
        a = AgentProcess(d, tmp_path / f"work-{node_id}", node_id, *extra, fake_gpus=fake_gpus)
        agents.append(a)
        return a.start()

    yield lambda kind, *a, **kw: daemon() if kind == "daemon" else agent(*a, **kw)
    for a in agents:
        a.stop()
    for d in daemons:
        d.kill()


def _submit(d: DaemonProcess, name: str, code: str, tmp: Path, **kw: object) -> int:
    admin = d.admin()
    try:
        return admin.submit(name, gpus=kw.pop("gpus", 1), command=(sys.executable, "-u", "-c", code),
                            working_dir=str(kw.pop("working_dir", tmp)), **kw).id
    finally:
        admin.close()


def _state(d: DaemonProcess, job: int, want: str, timeout: float = 60) -> object:
    admin = d.admin()
    try:
        wait_for(lambda: admin.state(job) == want, timeout=timeout,
                 what=f"job {job} to be {want} (is {admin.state(job)}: {admin.describe(job).state_reason})")
        return admin.describe(job)
    finally:
        admin.close()


def test_two_agents_on_disjoint_slices_confine_their_jobs(cluster: Callable[..., object], tmp_path: Path) -> None:
    d = cluster("daemon")
    a0 = cluster("agent", d, "slice0", "--cpus", "0", "--memory", "1G")
    a1 = cluster("agent", d, "slice1", "--cpus", "1", "--memory", "1G")
    jobs = [_submit(d, f"sleep{i}", SLEEPER, tmp_path) for i in range(2)]
    for j in jobs:
        _state(d, j, "running")
    seen = {}
    for a, core in ((a0, "0"), (a1, "1")):
        job = wait_for(lambda: next((j for j in jobs if a.task_log(j)), 0), timeout=30, what=f"a job on {a.node_id}")
        pid = a.task_pid(job)
        assert cpus_allowed(pid) == core, a.log_text()
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        assert f"{a.cgroup_parent}/{a.node_id}/job{job}-a1-r0" in cgroup
        limit = Path(f"/sys/fs/cgroup/memory/{a.cgroup_parent}/{a.node_id}/job{job}-a1-r0/memory.limit_in_bytes")
        assert int(limit.read_text()) == 1024**3
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        env = dict(e.decode().split("=", 1) for e in environ if b"=" in e)
        assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["SYNERGY_JOB_ID"] == str(job)
        assert env["SYNERGY_ALLOC_CORES"] == core and env["SYNERGY_NODE_ID"] == a.node_id
        token = env["SYNERGY_JOB_TOKEN"]
        assert len(token) >= 16 and token not in a.log_text() and token not in d.log_text()
        assert token.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        seen[job] = (a, pid)
    assert len(seen) == 2
    # cancel: STOP reaches the agent, the process and its cgroup go away
    admin = d.admin()
    try:
        for j in jobs:
            admin.CancelJob(admin_pb2.CancelJobRequest(job=str(j), reason="test done"))
    finally:
        admin.close()
    for j, (a, pid) in seen.items():
        wait_for(lambda: not alive(pid), timeout=60, what=f"job {j}'s process to be stopped")
        group = Path(f"/sys/fs/cgroup/memory/{a.cgroup_parent}/{a.node_id}/job{j}-a1-r0")
        wait_for(lambda: not group.exists(), timeout=30, what="the task's cgroup to be removed")
        # the exit is logged once the cgroup is gone: under load, a moment later
        wait_for(lambda: "task.exited" in a.log_text(), timeout=30, what="task.exited in the agent's log")
        assert "task.stopping" in a.log_text()


def test_a_task_past_its_memory_limit_is_oom_killed_alone(cluster: Callable[..., object], tmp_path: Path) -> None:
    d = cluster("daemon")
    a = cluster("agent", d, "mem", "--cpus", "0-1", "--memory", "1G", fake_gpus=2)
    calm = _submit(d, "calm", SLEEPER, tmp_path)
    hog = _submit(d, "hog", HOG, tmp_path)
    info = _state(d, hog, "failed", timeout=90)
    assert "OOM" in info.state_reason and "memory limit of 0.5 GB" in info.state_reason, info.state_reason
    assert "survived" not in a.task_log(hog)
    assert "task.oom_killed" in a.log_text()
    _state(d, calm, "running")
    assert alive(a.task_pid(calm))


def test_a_crash_reports_its_log_tail_and_bad_input_fails_only_its_task(
    cluster: Callable[..., object], tmp_path: Path
) -> None:
    d = cluster("daemon")
    a = cluster("agent", d, "bad", "--cpus", "0-1", "--memory", "1G", fake_gpus=2)
    good = _submit(d, "good", SLEEPER, tmp_path)
    crash = _submit(d, "crash", CRASH, tmp_path)
    nodir = _submit(d, "nodir", SLEEPER, tmp_path, working_dir=tmp_path / "no" / "such" / "dir")
    admin = d.admin()
    try:
        missing = admin.submit("missing", gpus=1, command=("no-such-binary-xyz", "--flag"),
                               working_dir=str(tmp_path)).id
    finally:
        admin.close()
    reason = _state(d, crash, "failed").state_reason
    assert "exited with code 3" in reason and "boom-marker: bad things" in reason, reason
    reason = _state(d, nodir, "failed").state_reason
    assert "code 127" in reason and "working_dir" in reason and "does not exist" in reason, reason
    reason = _state(d, missing, "failed").state_reason
    assert "'no-such-binary-xyz' not found" in reason, reason
    _state(d, good, "running")
    assert alive(a.task_pid(good))


def test_stop_sends_sigterm_first_and_the_job_may_checkpoint(cluster: Callable[..., object], tmp_path: Path) -> None:
    d = cluster("daemon")
    a = cluster("agent", d, "grace", "--cpus", "0", "--memory", "1G")
    job = _submit(d, "polite", TERM_AWARE, tmp_path)
    _state(d, job, "running")
    pid = a.task_pid(job)
    admin = d.admin()
    try:
        admin.CancelJob(admin_pb2.CancelJobRequest(job=str(job), reason="test"))
    finally:
        admin.close()
    wait_for(lambda: not alive(pid), timeout=60, what="the job to exit on SIGTERM")
    assert "got SIGTERM, checkpointing" in a.task_log(job)
    wait_for(lambda: "exit_code=75" in a.log_text(), timeout=30, what="the agent to reap exit 75")


def test_daemon_restart_agent_reconnects_and_nothing_is_launched_twice(
    cluster: Callable[..., object], tmp_path: Path
) -> None:
    from synergyd_harness import free_port

    port = free_port()
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600", "--port", str(port)).start()
    try:
        a = cluster("agent", d, "steady", "--cpus", "0", "--memory", "1G")
        job = _submit(d, "steady", SLEEPER, tmp_path)
        _state(d, job, "running")
        pid = a.task_pid(job)
        d.kill()
        wait_for(lambda: "agent.daemon_unreachable" in a.log_text(), timeout=30, what="the agent to notice")
        assert alive(pid)  # tasks keep running while the daemon is down
        d.start()
        restarted = time.time()
        admin = d.admin()
        try:
            def heard() -> bool:
                nodes = admin.ListNodes(admin_pb2.ListNodesRequest()).nodes
                return any(n.node_id == "steady" and n.last_heartbeat_unix_s > restarted for n in nodes)

            wait_for(heard, timeout=60, what="the agent to heartbeat the restarted daemon")
        finally:
            admin.close()
        _state(d, job, "running")
        assert alive(pid) and a.log_text().count("task.launched") == 1, a.log_text()
    finally:
        d.kill()


EXIT_7_ON_GO = ("import os, sys, time; print('PID', os.getpid(), flush=True)\n"
                "while not os.path.exists('go'): time.sleep(0.1)\n"
                "print('going', flush=True); sys.exit(7)")


def test_agent_kill9_and_restart_readopts_its_running_task(cluster: Callable[..., object], tmp_path: Path) -> None:
    d = cluster("daemon")
    a = cluster("agent", d, "phoenix", "--cpus", "0", "--memory", "1G")
    job = _submit(d, "survivor", EXIT_7_ON_GO, tmp_path)
    _state(d, job, "running")
    pid = a.task_pid(job)
    a.kill9()
    assert alive(pid)  # the task outlives its agent
    a.start()
    wait_for(lambda: a.log_text().count("agent.registered") == 2, timeout=30, what="the agent to re-register")
    assert f"task.readopted task={job}-1-0 pid={pid}" in a.log_text(), a.log_text()
    assert a.log_text().count("task.launched") == 1, a.log_text()  # nothing launched twice
    _state(d, job, "running")
    assert alive(pid) and f"job{job}-a1-r0" in Path(f"/proc/{pid}/cgroup").read_text()
    (tmp_path / "go").write_text("")  # now the re-adopted task exits 7: reported as such
    reason = _state(d, job, "failed").state_reason
    assert "exited with code 7" in reason and "going" in reason, reason
    assert a.log_text().count("task.launched") == 1
    a.stop()  # the second instance also removes the groups the first one created
    for controller in ("cpuset", "memory", "cpu"):
        assert not Path(f"/sys/fs/cgroup/{controller}/{a.cgroup_parent}").exists(), a.log_text()


def test_the_agent_serves_its_own_metrics_with_node_and_task_telemetry(
    cluster: Callable[..., object], tmp_path: Path
) -> None:
    import urllib.request

    d = cluster("daemon")
    a = cluster("agent", d, "metered", "--cpus", "0", "--memory", "1G", "--sample-interval-s", "0.2")
    job = _submit(d, "metered", SLEEPER, tmp_path)
    _state(d, job, "running")
    address = wait_for(lambda: (a.work_dir / "metrics.address").exists()
                       and (a.work_dir / "metrics.address").read_text().strip(), timeout=30, what="metrics.address")

    def scrape() -> str:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
            return r.read().decode()

    task = f'task="{job}-1-0"'
    text = wait_for(lambda: t if task in (t := scrape()) else "", timeout=30, what="the task's gauges")
    assert f'synergy_agent_task_rss_bytes{{node="metered",{task}}}' in text
    assert f'synergy_agent_task_membw_bytes_per_second{{node="metered",source="estimate",{task}}}' in text
    assert 'synergy_agent_node_membw_peak_bytes_per_second{node="metered",source="copy-benchmark"}' in text
    assert 'synergy_agent_task_launches_total{how="launched",node="metered"} 1.0' in text
    assert 'synergy_agent_node_tasks_running{node="metered"} 1.0' in text
