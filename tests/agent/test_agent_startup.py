"""The start-up phase (issue 14): no CPU quota from launch until the job reaches its training loop.

Real tasks under the real supervisor, on real cgroup v1 where the machine allows (root, v1 cpuset,
memory and cpu controllers), on one core. CPU use is the job process's own (utime + stime over a
second or two), asserted with generous margins. The machine is shared: the test's top cgroup is
given a large `cpu.shares` so processes outside it barely take that core from the test's tasks, and
what is measured is the agent's own arithmetic (quota, weights), not the neighbours' load.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from synergy.agent.cgroups import Cgroups, CgroupsV1, detect
from synergy.agent.report import task_status
from synergy.agent.startup import Startup
from synergy.agent.tasks import Phase, Supervisor, Task
from synergy.common import contract
from synergy.common.startup import APPLIED, STARTED, env_value, reached_training_loop
from synergyd_harness import wait_for
from synergy.v1 import common_pb2, node_pb2

CORE = max(os.sched_getaffinity(0))
TICK = os.sysconf("SC_CLK_TCK")

#: A job whose "start-up" burns CPU until the file argv[1] exists, then says it reached its training
#: loop (the very call the SynergyIterator makes), prints what the agent answered, and burns on.
BURNER = """
import os, sys
from synergy.common.startup import reached_training_loop
print('PID', os.getpid(), flush=True)
while not os.path.exists(sys.argv[1]):
    for _ in range(20000):
        pass
print('LOOP', reached_training_loop(), flush=True)
while True:
    pass
"""


#: A job that reaches its training loop at once and burns at its quota until the file argv[1]
#: exists, then says it is winding down (what the SynergyIterator says at exit) and burns on.
WINDER = """
import os, sys
from synergy.common.startup import JobLine
line = JobLine()
print('PID', os.getpid(), 'LOOP', line.reached_training_loop(), flush=True)
while not os.path.exists(sys.argv[1]):
    for _ in range(20000):
        pass
print('DOWN', line.winding_down(), flush=True)
while True:
    pass
"""


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _cores_used(*pids: int, window_s: float = 2.0) -> list[float]:
    """Cores each process used over the window (CPU seconds / wall seconds)."""
    before, t0 = [_cpu_s(p) for p in pids], time.monotonic()
    time.sleep(window_s)
    after, t1 = [_cpu_s(p) for p in pids], time.monotonic()
    return [(a - b) / (t1 - t0) for a, b in zip(after, before)]


def _spec(job: int, go: Path, cpus: float) -> node_pb2.TaskSpec:
    return node_pb2.TaskSpec(
        ref=node_pb2.TaskRef(job_id=job, attempt=1, rank=0), job_name=f"j{job}", world_size=1,
        command=[sys.executable, "-c", BURNER, str(go)],
        placement=common_pb2.Placement(node_id="n", gpus=0, cpus=cpus, mem_gb=0.25), job_token="t" * 20,
    )


def _v1() -> CgroupsV1:
    cg = detect(f"synergy-startup-test-{uuid.uuid4().hex[:8]}/n", (CORE,))
    if cg.kind != "v1":
        pytest.skip(f"needs root and cgroup v1 (CI runs as root); here: {cg.describe()}")
    assert isinstance(cg, CgroupsV1)
    top = cg.roots["cpu"] / cg.parent.split("/")[0]
    (top / "cpu.shares").write_text(str(1024 * 64))  # outweighs the machine's other processes on CORE
    return cg


def _supervisor(tmp_path: Path, cg: Cgroups, **kw: float) -> Supervisor:
    return Supervisor(node_id="n", cores=(CORE,), gpus=0, mem_gb=2, work_dir=tmp_path, cgroups=cg,
                      log=logging.getLogger("test-agent"), daemon_address="127.0.0.1:1", **kw)


def _cpu_file(cg: CgroupsV1, task: Task, name: str) -> int:
    return int((cg._dir("cpu", task.cgroup) / name).read_text())


def _started(sup: Supervisor, task: Task) -> None:
    wait_for(lambda: "PID" in task.log_path.read_text(), timeout=30, what="the job to start")


def _startup_over(sup: Supervisor, task: Task, timeout: float = 30) -> None:
    def over() -> bool:
        sup.poll()
        return task.startup is None

    wait_for(over, timeout=timeout, what=f"the start-up phase of {task.key} to end")


def test_a_starting_task_runs_beyond_its_quota_on_an_idle_core_and_is_held_to_it_after(tmp_path: Path) -> None:
    cg = _v1()
    sup = _supervisor(tmp_path, cg)
    go = tmp_path / "go"
    try:
        t = sup.launch(_spec(1, go, cpus=0.25))
        assert t.phase == Phase.RUNNING, t.message
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == -1 and _cpu_file(cg, t, "cpu.shares") == 256
        _started(sup, t)
        [starting] = _cores_used(t.pid, window_s=1.5)
        assert starting > 0.6, f"start-up used {starting:.2f} cores of an idle core (quota 0.25)"
        # The daemon is told: its round sees a starting job at its proportional share.
        assert task_status(t, "n").starting_up
        go.touch()
        _startup_over(sup, t)
        assert not task_status(t, "n").starting_up
        wait_for(lambda: "LOOP start-up over: the agent applied the CPU quota" in t.log_path.read_text(),
                 timeout=30, what="the job's answer")
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == _cpu_file(cg, t, "cpu.cfs_period_us") // 4
        [after] = _cores_used(t.pid, window_s=1.5)
        assert after < 0.35, f"after start-up: {after:.2f} cores (quota 0.25)"
        print(f"one core, 0.25 CPU: start-up {starting:.2f} cores, then {after:.2f}")
    finally:
        sup.shutdown(0)
        cg.teardown()


def test_a_busy_neighbour_keeps_its_allocation_while_a_task_starts_beside_it(tmp_path: Path) -> None:
    """0.7 CPU (training: its start-up over) and 0.1 CPU (starting) on one core. The weights (717 :
    102) give the neighbour its 0.7 and the starter the idle rest, 0.3; equal weights would have
    split the core in halves (the neighbour below its allocation), a quota 0.1 for the starter."""
    cg = _v1()
    sup = _supervisor(tmp_path, cg)
    go, never = tmp_path / "go", tmp_path / "never"
    go.touch()
    try:
        neighbour = sup.launch(_spec(1, go, cpus=0.7))
        _startup_over(sup, neighbour)
        assert _cpu_file(cg, neighbour, "cpu.shares") == 717
        starter = sup.launch(_spec(2, never, cpus=0.1))
        assert starter.startup is not None and _cpu_file(cg, starter, "cpu.cfs_quota_us") == -1
        _started(sup, neighbour)
        _started(sup, starter)
        n, s = _cores_used(neighbour.pid, starter.pid)
        assert n > 0.6, f"the neighbour got {n:.2f} cores of its 0.7 (the starter {s:.2f})"
        assert s > 0.2, f"the starter got {s:.2f} cores (quota 0.1) beside the neighbour's {n:.2f}"
        print(f"one core: neighbour (0.7 CPU) {n:.2f} cores, starter (0.1 CPU) {s:.2f}")
    finally:
        sup.shutdown(0)
        cg.teardown()


def test_the_cap_ends_the_phase_of_a_job_that_never_says(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cg = _v1()
    sup = _supervisor(tmp_path, cg, startup_cap_s=1.0)
    try:
        launched = time.monotonic()
        t = sup.launch(_spec(1, tmp_path / "never", cpus=0.25))
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == -1
        deadline = sup.next_deadline()
        assert deadline is not None and deadline <= launched + 1.0 + 0.5  # the agent wakes for the cap
        caplog.set_level(logging.INFO, logger="test-agent")
        _startup_over(sup, t)
        assert time.monotonic() - launched >= 1.0
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == _cpu_file(cg, t, "cpu.cfs_period_us") // 4
        [done] = [r.fields for r in caplog.records  # type: ignore[attr-defined]
                  if r.getMessage() == "task.startup_done"]
        assert done["task"] == str(t.key) and done["quota"] == 0.25 and done["after_s"] >= 1.0
        assert "its cap of 1 s" in done["reason"]
        # no deadline left; the job's end stays heard (a late STARTED is answered, then its last word)
        assert sup.next_deadline() is None and sup.wake_fds() == [t.line.fileno()]  # type: ignore[union-attr]
    finally:
        sup.shutdown(0)
        cg.teardown()


def test_resize_and_throttle_during_start_up_and_an_agent_restart(tmp_path: Path) -> None:
    """A RESIZE during start-up is remembered (new cpuset and weight now, its quota at the end); a
    throttle wins over the phase (a held contender stays held) and its restore gives the phase back;
    a new agent instance re-adopting a starting task applies its quota (the socket is gone)."""
    cg = _v1()
    old = _supervisor(tmp_path, cg)
    new: Supervisor | None = None
    try:
        t = old.launch(_spec(1, tmp_path / "never", cpus=0.25))
        period = _cpu_file(cg, t, "cpu.cfs_period_us")
        assert old.resize(t.key, 0, 0.5, 0.25)
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == -1 and _cpu_file(cg, t, "cpu.shares") == 512
        assert old.set_throttle(t.key, 1)
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == period // 4  # half of 0.5
        assert old.set_throttle(t.key, 0)
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == -1 and t.startup is not None
        # the agent dies (no shutdown): its successor finds the task starting in the state file
        new = _supervisor(tmp_path, cg)
        new.readopt()
        k = new.tasks[t.key]
        assert k.phase == Phase.RUNNING and k.startup is None
        assert _cpu_file(cg, k, "cpu.cfs_quota_us") == period // 2
        assert '"starting": false' in new.state_path.read_text()
    finally:
        if new is not None:
            new.shutdown(0)
        old.shutdown(0)
        cg.teardown()


def test_an_agent_leaving_its_tasks_running_applies_their_quota_first(tmp_path: Path) -> None:
    cg = _v1()
    sup = _supervisor(tmp_path, cg)
    try:
        t = sup.launch(_spec(1, tmp_path / "never", cpus=0.25))
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == -1
        sup.shutdown(0, stop_tasks=False)
        assert t.startup is None and t.alive
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == _cpu_file(cg, t, "cpu.cfs_period_us") // 4
    finally:
        sup.shutdown(0)
        cg.teardown()


def test_without_cgroups_there_is_no_start_up_phase(tmp_path: Path) -> None:
    """The `none` fallback (affinity only, no quota to lift): no socket, no variable, nothing to end."""
    sup = _supervisor(tmp_path, Cgroups("test"))
    spec = _spec(1, tmp_path / "go", cpus=0.25)
    spec.command[:] = [sys.executable, "-c", f"import os; print('PID', os.getpid(), "
                       f"os.environ.get({contract.STARTUP_FD!r}, 'none'), flush=True); import time; time.sleep(60)"]
    try:
        t = sup.launch(spec)
        assert t.phase == Phase.RUNNING and t.startup is None
        wait_for(lambda: "PID" in t.log_path.read_text(), timeout=30, what="the job to start")
        assert t.log_path.read_text().split()[-1] == "none"
        assert sup.wake_fds() == [] and sup.next_deadline() is None
    finally:
        sup.shutdown(0)


# -- the handshake itself (both halves, no cgroups) ------------------------------------------------------
def test_the_job_waits_for_the_agent_s_answer_and_every_bad_case_lets_it_go_on() -> None:
    phase, job_fd = Startup.open(time.monotonic(), 60)
    os.set_inheritable(job_fd, True)
    env = {contract.STARTUP_FD: env_value(job_fd)}
    assert phase.heard() == ""
    answered = threading.Event()

    def agent() -> None:  # what the supervisor's poll does once the socket is readable
        wait_for(lambda: phase.heard() != "", timeout=10)
        answered.set()
        phase.close(answer=True)

    threading.Thread(target=agent, daemon=True).start()
    assert reached_training_loop(env) == "start-up over: the agent applied the CPU quota"
    assert answered.is_set() and contract.STARTUP_FD not in env  # once per process
    assert reached_training_loop(env) == ""  # no variable: nothing to do
    with pytest.raises(OSError):
        os.fstat(job_fd)  # the job's end is closed (no DataLoader worker inherits it)

    # the agent's end is gone (it restarted): no wait
    phase, job_fd = Startup.open(time.monotonic(), 60)
    phase.close(answer=False)
    t0 = time.monotonic()
    assert "gone" in reached_training_loop({contract.STARTUP_FD: env_value(job_fd)}, timeout_s=5)
    assert time.monotonic() - t0 < 2
    # no answer within the bound
    phase, job_fd = Startup.open(time.monotonic(), 60)
    assert "did not answer" in reached_training_loop({contract.STARTUP_FD: env_value(job_fd)}, timeout_s=0.2)
    assert STARTED in phase.sock.recv(16)  # type: ignore[union-attr]
    phase.close(answer=False)
    # a number that is not our socket (a child that did not inherit it; a reused descriptor)
    r, w = os.pipe()
    try:
        assert "not this process's start-up socket" in reached_training_loop({contract.STARTUP_FD: f"{r}:1"})
        a, b = socket.socketpair()
        assert "not this process's start-up socket" in reached_training_loop(
            {contract.STARTUP_FD: f"{b.fileno()}:{os.fstat(a.fileno()).st_ino}"})
        a.close()
        b.close()
    finally:
        os.close(r)
        os.close(w)
    assert "names no open descriptor" in reached_training_loop({contract.STARTUP_FD: "999999:1"})
    assert "names no open descriptor" in reached_training_loop({contract.STARTUP_FD: "x"})
    assert APPLIED != STARTED


def test_a_job_winding_down_runs_without_its_quota_until_the_cap(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The wrap's last word at exit: the teardown of a finished job's process (torch, its workers)
    runs without the quota, so the next task on its GPUs starts sooner; the cap gives it back."""
    cg = _v1()
    sup = _supervisor(tmp_path, cg, wind_down_cap_s=3.0)
    caplog.set_level(logging.INFO, logger="test-agent")
    down = tmp_path / "down"
    spec = _spec(1, down, cpus=0.25)
    spec.command[:] = [sys.executable, "-c", WINDER, str(down)]
    try:
        t = sup.launch(spec)
        _startup_over(sup, t)
        wait_for(lambda: "LOOP start-up over" in t.log_path.read_text(), timeout=30, what="the job's loop")
        period = _cpu_file(cg, t, "cpu.cfs_period_us")
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == period // 4 and t.line is not None
        [held] = _cores_used(t.pid, window_s=1.0)
        assert held < 0.35, f"at its quota: {held:.2f} cores (quota 0.25)"
        down.touch()

        def winding() -> bool:
            sup.poll()
            return t.wind_down_until is not None

        wait_for(winding, timeout=30, what="the agent to hear the job wind down")
        # The job prints its answer after the agent's reply: under its quota it may not have yet.
        wait_for(lambda: "DOWN True" in t.log_path.read_text(), timeout=10, what="the job's answer")
        assert t.line is None
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == -1 and _cpu_file(cg, t, "cpu.shares") == 256
        deadline = sup.next_deadline()
        assert deadline is not None and deadline <= time.monotonic() + 3.0  # the agent wakes for the cap
        [unheld] = _cores_used(t.pid, window_s=1.0)
        assert unheld > 0.6, f"winding down: {unheld:.2f} cores of an idle core"

        def capped() -> bool:
            sup.poll()
            return t.wind_down_until is None

        wait_for(capped, timeout=30, what="the wind-down's cap")
        assert _cpu_file(cg, t, "cpu.cfs_quota_us") == period // 4
        events = [r.getMessage() for r in caplog.records]
        assert "task.winding_down" in events and "task.wind_down_over" in events, events
        print(f"one core, 0.25 CPU: {held:.2f} cores at its quota, {unheld:.2f} winding down")
    finally:
        sup.shutdown(0)
        cg.teardown()
