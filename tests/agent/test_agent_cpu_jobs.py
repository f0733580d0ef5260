"""CPU-only jobs (`kind: cpu`) end to end: a real synergyd places them on CPUs a training job
leaves free (the core's property tests cover the mix), a real synergy-agent runs them as ordinary 0-GPU tasks inside their cpuset."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent_harness import AgentProcess, cpus_allowed, is_root_with_v1
from synergyd_harness import DaemonProcess, wait_for
from synergy.v1 import admin_pb2

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the cgroup layer is unit-tested without")

SLEEPER = "import os, time; print('PID', os.getpid(), flush=True); time.sleep(600)"
QUICK = "print('cpu job done', flush=True)"


def test_cpu_jobs_run_as_zero_gpu_tasks_in_their_cpuset_without_leases(tmp_path: Path) -> None:
    # A short launch timeout: a training job that never registers would be requeued after 2 s.
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "2").start()
    # 2 CPUs and one fake GPU that nothing uses.
    agent = AgentProcess(d, tmp_path / "work", "n0", "--cpus", "0-1", "--memory", "2G", fake_gpus=1)
    admin = d.admin()
    try:
        agent.start()
        py = (sys.executable, "-u", "-c")
        # 0 GPUs and no CPU request: refused naming the field.
        with pytest.raises(Exception) as bad:
            admin.submit("cpubad", gpus=0, command=py + (QUICK,), kind="cpu", working_dir=str(tmp_path))
        assert "spec.cpus_hint" in str(bad.value)
        cpu_long = admin.submit("cpulong", gpus=0, command=py + (SLEEPER,), kind="cpu", cpus_hint=1,
                                mem_gb_hint=0.25, working_dir=str(tmp_path)).id
        cpu_quick = admin.submit("cpuquick", gpus=0, command=py + (QUICK,), kind="cpu", cpus_hint=0.5,
                                 mem_gb_hint=0.25, working_dir=str(tmp_path)).id
        wait_for(lambda: admin.state(cpu_quick) == "succeeded", timeout=60,
                 what=f"cpu job to succeed ({admin.describe(cpu_quick).state_reason})")
        assert "cpu job done" in agent.task_log(cpu_quick)
        wait_for(lambda: admin.state(cpu_long) == "running", timeout=60, what="long cpu job to run")
        info = admin.describe(cpu_long)
        assert [(p.node_id, p.gpus, p.cpus) for p in info.placements] == [("n0", 0, 1.0)]
        pid = wait_for(lambda: agent.task_pid(cpu_long), timeout=30, what="the cpu job's pid")
        assert len(cpus_allowed(pid).split(",")) == 1 and "-" not in cpus_allowed(pid)
        # Still running several rounds later: a CPU-only job needs no lease renewal.
        rounds = admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest()).round_index
        wait_for(lambda: admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest()).round_index >= rounds + 10,
                 timeout=60, what="ten more rounds (5 s, past the launch timeout)")
        assert admin.state(cpu_long) == "running" and admin.describe(cpu_long).attempt == 1
        admin.CancelJob(admin_pb2.CancelJobRequest(job=str(cpu_long)))
        wait_for(lambda: admin.state(cpu_long) == "cancelled", timeout=60, what="the cpu job to be cancelled")
    finally:
        admin.close()
        agent.stop()
        d.kill()
