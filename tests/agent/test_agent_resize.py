"""Resize in place with a real synergyd and agent: when a round changes a running job's CPUs (tune
shrinks it for a newcomer), the job's own process sees its cpuset change under the same pid."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from agent_harness import AgentProcess, alive, cpus_allowed, is_root_with_v1
from synergyd_harness import DaemonProcess, wait_for

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the cgroup layer is unit-tested without")

# Prints its pid, then its CPU affinity each time the kernel reports a different one.
WATCHER = ("import os, time; print('PID', os.getpid(), flush=True); seen = None\n"
           "while True:\n"
           "    now = sorted(os.sched_getaffinity(0))\n"
           "    if now != seen: print('CPUS', ','.join(map(str, now)), flush=True); seen = now\n"
           "    time.sleep(0.1)")
SLEEPER = "import os, time; print('PID', os.getpid(), flush=True); time.sleep(600)"


def test_a_round_that_shrinks_a_job_resizes_it_in_place_and_the_process_sees_it(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600", "--mechanism", "tune").start()
    agent = AgentProcess(d, tmp_path / "work", "n0", "--cpus", "0-1", "--memory", "2G", fake_gpus=2)
    admin = d.admin()
    py = (sys.executable, "-u", "-c")
    try:
        agent.start()
        a = admin.submit("a", gpus=1, model="resnet18", command=py + (WATCHER,), working_dir=str(tmp_path)).id
        pid = agent.task_pid(a)
        wait_for(lambda: "CPUS 0,1" in agent.task_log(a), timeout=30, what="job a on both cores (alone, tune)")
        assert [p.cpus for p in admin.describe(a).placements] == [2.0]
        b = admin.submit("b", gpus=1, model="resnet18", command=py + (SLEEPER,), working_dir=str(tmp_path)).id
        wait_for(lambda: admin.state(b) == "running", timeout=60, what="job b to run beside a")
        seen = wait_for(lambda: re.findall(r"^CPUS (\S+)$", agent.task_log(a), re.M)[1:], timeout=60,
                        what="job a's process to see its cpuset shrink")
        assert len(seen[0].split(",")) == 1, seen  # one core now, seen from inside the job
        assert alive(pid) and agent.task_pid(a) == pid and cpus_allowed(pid) == seen[0]
        info = admin.describe(a)
        assert info.attempt == 1 and [p.cpus for p in info.placements] == [1.0]
        assert "task.resized" in agent.log_text()
    finally:
        admin.close()
        agent.stop()
        d.kill()
