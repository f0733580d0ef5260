"""The task supervisor with real processes, without a daemon: launch, resize, stop, bad input."""

from __future__ import annotations

import logging
import os
import sys
import uuid
from pathlib import Path

import pytest

from agent_harness import alive, cpus_allowed
from synergy.agent.cgroups import Cgroups, detect
from synergy.agent.cores import format_cpu_list, parse_cpu_list
from synergy.agent.report import task_status
from synergy.agent.tasks import EXIT_LOST, LAUNCH_FAILED, Phase, Supervisor, TaskKey
from synergyd_harness import wait_for
from synergy.v1 import common_pb2, node_pb2

CORES = tuple(sorted(os.sched_getaffinity(0)))
#: says it reached its training loop at once (its start-up phase, without a quota, ends: agent/startup.py)
STARTS_THEN_SLEEPS = ("from synergy.common.startup import reached_training_loop; reached_training_loop(); "
                      "import time; time.sleep(600)")
IGNORE_TERM = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
               "print('PID', os.getpid(), flush=True); time.sleep(600)")


@pytest.fixture
def sup(tmp_path: Path) -> Supervisor:
    s = Supervisor(node_id="n", cores=CORES, gpus=2, mem_gb=4, work_dir=tmp_path, cgroups=Cgroups("test"),
                   log=logging.getLogger("test-agent"), daemon_address="127.0.0.1:1")
    yield s
    s.shutdown(0)


def _spec(job: int, code: str | None = "import time; time.sleep(600)", cpus: float = 1, gpus: int = 1,
          mem_gb: float = 1, working_dir: str = "") -> node_pb2.TaskSpec:
    return node_pb2.TaskSpec(
        ref=node_pb2.TaskRef(job_id=job, attempt=1, rank=0), job_name=f"j{job}", world_size=1,
        command=[sys.executable, "-c", code] if code is not None else [], working_dir=working_dir,
        placement=common_pb2.Placement(node_id="n", gpus=gpus, cpus=cpus, mem_gb=mem_gb), job_token="t" * 20,
    )


def _until_exited(sup: Supervisor, key: TaskKey, timeout: float = 30) -> None:
    def done() -> bool:
        sup.poll()
        return sup.tasks[key].phase == Phase.EXITED

    wait_for(done, timeout=timeout, what=f"task {key} to exit")


def test_bad_input_fails_only_that_task(sup: Supervisor, tmp_path: Path) -> None:
    good = sup.launch(_spec(1))
    assert good.phase == Phase.RUNNING and good.gpu_indices == (0,)
    cases = {
        2: (_spec(2, code=None), "task.command: empty"),
        3: (_spec(3, working_dir=str(tmp_path / "nope")), "does not exist"),
        4: (_spec(4, cpus=len(CORES) + 1), "impossible placement: needs"),
        5: (_spec(5, gpus=3), "needs 3 GPUs, 1 of 2 are free"),
        6: (_spec(6, mem_gb=64), "needs 64 GB of memory"),
    }
    for job, (spec, message) in cases.items():
        t = sup.launch(spec)
        assert t.phase == Phase.EXITED and t.exit_code == LAUNCH_FAILED and message in t.message, t.message
    missing = node_pb2.TaskSpec()
    missing.CopyFrom(_spec(7))
    missing.command[:] = ["/no/such/binary"]
    t = sup.launch(missing)
    assert t.phase == Phase.EXITED and "'/no/such/binary' not found" in t.message
    assert sup.launch(_spec(1)) is good  # a repeated LAUNCH is idempotent
    assert alive(good.pid) and good.phase == Phase.RUNNING


def test_stop_kills_after_the_grace_when_sigterm_is_ignored(sup: Supervisor) -> None:
    t = sup.launch(_spec(1, IGNORE_TERM))
    key = t.key
    wait_for(lambda: "PID" in t.log_path.read_text(), timeout=30, what="the job to start")
    sup.stop(key, grace_s=0.5, reason="test")
    assert t.phase == Phase.STOPPING and sup.next_deadline() is not None
    _until_exited(sup, key)
    assert t.exit_code == -9 and "stopped by the agent (test)" in t.message
    sup.forget(key)
    assert key not in sup.tasks


def test_resize_moves_cores_in_place_and_exits_keep_being_reported(sup: Supervisor) -> None:
    if len(CORES) < 2:
        pytest.skip("needs two cores")
    t = sup.launch(_spec(1, cpus=1))
    wait_for(lambda: t.pid and cpus_allowed(t.pid) == str(CORES[0]), timeout=30, what="affinity")
    assert sup.resize(t.key, 1, 2, 1)
    assert t.cores == CORES[:2] and t.pid and alive(t.pid)
    assert parse_cpu_list(cpus_allowed(t.pid)) == CORES[:2]  # affinity moved in place (no cgroups here)
    assert not sup.resize(t.key, 2, 1, 1)  # GPUs never change in place
    os.kill(t.pid, 9)
    _until_exited(sup, t.key)
    assert t.exit_code == -9 and "exit code -9" in t.message
    sup.forget(TaskKey(99, 1, 0))  # unknown: ignored
    assert t.key in sup.tasks  # reported until the daemon says forget


def test_four_half_cpu_tasks_share_two_cores_each_with_its_quota(tmp_path: Path) -> None:
    """0.5 CPU per task on a 2-core slice: all four run (two per core), each held to 0.5 CPU."""
    if len(CORES) < 2:
        pytest.skip("needs two cores")
    cg = detect(f"synergy-test/{uuid.uuid4().hex[:8]}", CORES[:2])
    s = Supervisor(node_id="n", cores=CORES[:2], gpus=4, mem_gb=4, work_dir=tmp_path, cgroups=cg,
                   log=logging.getLogger("test-agent"), daemon_address="127.0.0.1:1")
    try:
        tasks = [s.launch(_spec(j, STARTS_THEN_SLEEPS, cpus=0.5, mem_gb=0.25)) for j in range(1, 5)]
        assert all(t.phase == Phase.RUNNING for t in tasks), [t.message for t in tasks]
        both = format_cpu_list(CORES[:2])
        assert all(t.grant.shared == CORES[:2] for t in tasks)
        for t in tasks:
            wait_for(lambda: cpus_allowed(t.pid) == both, timeout=30, what="affinity")
            wait_for(lambda: (s.poll(), t.startup is None)[1], timeout=30, what="the start-up phase to end")
            if cg.kind == "v1":
                quota = (cg._dir("cpu", t.cgroup) / "cpu.cfs_quota_us").read_text().strip()
                period = (cg._dir("cpu", t.cgroup) / "cpu.cfs_period_us").read_text().strip()
                assert int(quota) == int(period) // 2
        # the node is full: a 1-CPU task does not fit
        t = s.launch(_spec(9, cpus=1, gpus=0, mem_gb=0.25))
        assert t.phase == Phase.EXITED and "needs 1 whole cores" in t.message
        s.stop(tasks[0].key, 0, "test")
        s.stop(tasks[2].key, 0, "test")
        for k in (tasks[0].key, tasks[2].key):
            _until_exited(s, k)
        # a whole core comes out of the pool; the two halves left move onto the other core
        t = s.launch(_spec(10, cpus=1, gpus=0, mem_gb=0.25))
        assert t.phase == Phase.RUNNING and len(t.grant.exclusive) == 1 and t.grant.shared == ()
        rest = tuple(c for c in CORES[:2] if c not in t.grant.exclusive)
        for left in (tasks[1], tasks[3]):
            assert left.grant.shared == rest
            wait_for(lambda: cpus_allowed(left.pid) == format_cpu_list(rest), timeout=30, what="affinity")
        wait_for(lambda: cpus_allowed(t.pid) == format_cpu_list(t.grant.exclusive), timeout=30, what="affinity")
        # and goes back to it when the whole task ends
        s.stop(t.key, 0, "test")
        _until_exited(s, t.key)
        assert tasks[1].grant.shared == CORES[:2]
        wait_for(lambda: cpus_allowed(tasks[1].pid) == both, timeout=30, what="affinity")
    finally:
        s.shutdown(0)
        cg.teardown()


def test_a_new_supervisor_readopts_running_tasks_and_reports_the_rest(tmp_path: Path) -> None:
    """The agent died (no shutdown): its successor takes over from the state file and the shims."""
    cg = detect(f"synergy-test/{uuid.uuid4().hex[:8]}", CORES)

    def supervisor() -> Supervisor:
        return Supervisor(node_id="n", cores=CORES, gpus=4, mem_gb=4, work_dir=tmp_path, cgroups=cg,
                          log=logging.getLogger("test-agent"), daemon_address="127.0.0.1:1")

    old = supervisor()
    keep, orphan, done = (old.launch(_spec(j, IGNORE_TERM if j == 1 else "import time; time.sleep(600)",
                                            cpus=0.25, mem_gb=0.25)) for j in (1, 2, 3))
    for t in (keep, orphan, done):
        assert t.phase == Phase.RUNNING, t.message
    wait_for(lambda: "PID" in keep.log_path.read_text(), timeout=30, what="the job to start")
    assert keep.pid != keep.shim_pid and keep.pid in (cg.pids(keep.cgroup) if cg.kind != "none" else [keep.pid])
    assert "t" * 20 not in old.state_path.read_text()  # the job token never reaches the state file
    os.kill(orphan.shim_pid, 9)  # its exit status can no longer be known
    orphan.proc.wait()
    os.kill(done.pid, 9)  # exits while no agent watches: the shim records it
    wait_for(lambda: (tmp_path / "exits" / f"{done.key}.exit").exists(), timeout=30, what="the exit record")
    stale = old.state_path.with_name(f".tmp-{old.state_path.name}.dead")  # a crash mid-write left it
    stale.write_text("{")
    new = supervisor()
    try:
        new.readopt()
        assert not stale.exists() and old.state_path.exists()
        k = new.tasks[keep.key]
        assert k.phase == Phase.RUNNING and k.pid == keep.pid and k.grant == keep.grant and alive(k.pid)
        assert task_status(k, "n").pid == keep.pid
        o = new.tasks[orphan.key]
        assert o.phase == Phase.EXITED and o.exit_code == EXIT_LOST and "lost: its shim" in o.message
        wait_for(lambda: not alive(orphan.pid), timeout=30, what="the lost task's process to be killed")
        d = new.tasks[done.key]
        assert d.phase == Phase.EXITED and d.exit_code == -9
        # a STOP through the new supervisor: SIGTERM ignored, SIGKILL after the grace, exit reported
        new.stop(k.key, 0.2, "test")
        _until_exited(new, k.key)
        assert k.exit_code == -9 and "stopped by the agent (test)" in k.message
        # nothing launched twice: a repeated LAUNCH of the re-adopted task is the same task
        assert new.launch(_spec(1)) is k
    finally:
        new.shutdown(0)
        old.shutdown(0)
        cg.teardown()


class _UnjoinableCgroups(Cgroups):
    kind = "broken"

    def join_files(self, name: str) -> list[str]:
        return ["/nonexistent/synergy/cgroup.procs"]


def test_a_task_that_cannot_enter_its_cgroup_fails_alone_with_the_reason(tmp_path: Path) -> None:
    s = Supervisor(node_id="n", cores=CORES, gpus=0, mem_gb=1, work_dir=tmp_path, cgroups=_UnjoinableCgroups("t"),
                   log=logging.getLogger("test-agent"), daemon_address="127.0.0.1:1")
    t = s.launch(_spec(1, gpus=0, mem_gb=0.1))
    assert t.phase == Phase.EXITED and t.exit_code == LAUNCH_FAILED
    assert "cannot enter the task's cgroup or cores" in t.message and "/nonexistent/synergy" in t.message
    assert t.pid == 0 and not t.log_path.read_text()  # the job never ran
