"""Packed tasks (Tesserae, issue 10): two tasks on one GPU index, each with its own cores and
memory limit, with real processes in real cgroups (only the GPUs are fake)."""

from __future__ import annotations

import logging
import os
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from agent_harness import cpus_allowed
from synergy.agent.cgroups import Cgroups, detect
from synergy.agent.cores import format_cpu_list
from synergy.agent.tasks import LAUNCH_FAILED, Phase, Supervisor, Task, TaskKey
from synergyd_harness import wait_for
from synergy.v1 import common_pb2, node_pb2

CORES = tuple(sorted(os.sched_getaffinity(0)))
SLEEP = "import time; time.sleep(600)"


def _spec(job: int, packed_with: int = 0, gpus: int = 1, cpus: float = 0.25, mem_gb: float = 0.25) -> node_pb2.TaskSpec:
    return node_pb2.TaskSpec(
        ref=node_pb2.TaskRef(job_id=job, attempt=1, rank=0), job_name=f"j{job}", world_size=1,
        command=[sys.executable, "-c", SLEEP], packed_with_job_id=packed_with,
        placement=common_pb2.Placement(node_id="n", gpus=gpus, cpus=cpus, mem_gb=mem_gb), job_token="t" * 20,
    )


@pytest.fixture
def cg() -> Iterator[Cgroups]:
    groups = detect(f"synergy-test/{uuid.uuid4().hex[:8]}", CORES)
    yield groups
    groups.teardown()


def _supervisor(cg: Cgroups, work_dir: Path) -> Supervisor:
    return Supervisor(node_id="n", cores=CORES, gpus=2, mem_gb=4, work_dir=work_dir, cgroups=cg,
                      log=logging.getLogger("test-agent"), daemon_address="127.0.0.1:1")


def _env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in raw if b"=" in e)


def _visible(task: Task) -> str | None:
    """CUDA_VISIBLE_DEVICES of the job's process (once it has exec'd the job)."""
    env = _env(task.pid)
    return env.get("CUDA_VISIBLE_DEVICES") if "SYNERGY_JOB_ID" in env else None


def _memory_limit(cg: Cgroups, task: Task) -> int | None:
    if cg.kind == "v1":
        return int((cg._dir("memory", task.cgroup) / "memory.limit_in_bytes").read_text())
    if cg.kind == "v2":
        return int((cg._dir("memory", task.cgroup) / "memory.max").read_text())
    return None


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")
def test_a_packed_task_shares_its_hosts_gpu_with_cores_and_memory_of_its_own(cg: Cgroups, tmp_path: Path) -> None:
    sup = _supervisor(cg, tmp_path)
    try:
        host = sup.launch(_spec(1, cpus=1, mem_gb=0.25))
        partner = sup.launch(_spec(2, packed_with=1, cpus=0.5, mem_gb=0.5))
        assert host.phase == Phase.RUNNING and partner.phase == Phase.RUNNING, partner.message
        assert host.gpu_indices == partner.gpu_indices == (0,) and partner.packed_with == 1
        for t in (host, partner):
            wait_for(lambda: _visible(t) is not None, timeout=30, what=f"job {t.key.job_id} to start")
            assert _visible(t) == "0"
        assert not set(host.cores) & set(partner.cores)  # each its own cores, in its own cgroup
        wait_for(lambda: cpus_allowed(partner.pid) == format_cpu_list(partner.grant.shared), timeout=30,
                 what="affinity")
        assert cpus_allowed(host.pid) == str(host.grant.exclusive[0])
        if cg.kind != "none":
            assert _memory_limit(cg, host) == 256 * 1024**2 and _memory_limit(cg, partner) == 512 * 1024**2
            assert host.pid in cg.pids(host.cgroup) and partner.pid in cg.pids(partner.cgroup)
        # no third task on GPU 0; an unpacked task takes the other GPU, and then there is none
        third = sup.launch(_spec(3, packed_with=1))
        assert third.phase == Phase.EXITED and third.exit_code == LAUNCH_FAILED
        assert "task.packed_with_job_id: GPU 0 of job 1 already carries 2 tasks" in third.message
        own = sup.launch(_spec(4))
        assert own.phase == Phase.RUNNING and own.gpu_indices == (1,)
        sup.stop(own.key, 0, "test")
        # the pair's GPU stays taken while either of its tasks runs
        sup.stop(host.key, 0, "test")
        wait_for(lambda: (sup.poll(), host.phase == Phase.EXITED and own.phase == Phase.EXITED)[1], timeout=30,
                 what="the host and the unpacked task to exit")
        assert partner.phase == Phase.RUNNING
        fits = sup.launch(_spec(5))
        assert fits.phase == Phase.RUNNING and fits.gpu_indices == (1,), fits.message
        full = sup.launch(_spec(6))
        assert full.phase == Phase.EXITED and "needs 1 GPUs, 0 of 2 are free" in full.message
    finally:
        sup.shutdown(0)


def test_a_packed_launch_without_its_host_fails_cleanly(cg: Cgroups, tmp_path: Path) -> None:
    sup = _supervisor(cg, tmp_path)
    try:
        orphan = sup.launch(_spec(2, packed_with=1))
        assert orphan.phase == Phase.EXITED and orphan.exit_code == LAUNCH_FAILED and orphan.pid == 0
        assert "task.packed_with_job_id: job 1 has no running task on this node" in orphan.message
        assert orphan.gpu_indices == ()
        host = sup.launch(_spec(1, gpus=2))
        wrong = sup.launch(_spec(3, packed_with=1, gpus=1))
        assert host.phase == Phase.RUNNING and wrong.phase == Phase.EXITED
        assert "job 1 holds 2 GPUs here, this task asks for 1" in wrong.message
        # a stopping host takes no partner
        sup.stop(host.key, 30, "test")
        late = sup.launch(_spec(4, packed_with=1, gpus=2))
        assert late.phase == Phase.EXITED and "has no running task" in late.message
    finally:
        sup.shutdown(0)


def test_a_restarted_agent_keeps_the_pair(cg: Cgroups, tmp_path: Path) -> None:
    old = _supervisor(cg, tmp_path)
    new = _supervisor(cg, tmp_path)
    try:
        host = old.launch(_spec(1))
        partner = old.launch(_spec(2, packed_with=1))
        assert partner.phase == Phase.RUNNING, partner.message
        new.readopt()
        k = new.tasks[TaskKey(2, 1, 0)]
        assert k.phase == Phase.RUNNING and k.adopted and k.packed_with == 1 and k.gpu_indices == host.gpu_indices
        third = new.launch(_spec(3, packed_with=1))
        assert "already carries 2 tasks" in third.message
        own = new.launch(_spec(4))
        assert own.phase == Phase.RUNNING and own.gpu_indices == (1,)
    finally:
        new.shutdown(0)
        old.shutdown(0)


def test_the_agents_packing_limit_is_the_cores_definition() -> None:
    """Issue 15 (no decision outside the core): the agent kept its own `MAX_TASKS_PER_GPU = 2`
    beside the core's packing limit. One definition (synergy.common.tasks), read by both."""
    import ast

    root = Path(__file__).resolve().parents[2]
    defined = []
    for folder in ("agent", "scheduler", "common"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AnnAssign) else []
                defined += [f"{path.relative_to(root)}:{t.id}" for t in targets
                            if isinstance(t, ast.Name) and t.id.endswith("_PER_GPU") and "MAX" in t.id]
    assert defined == ["common/tasks.py:MAX_JOBS_PER_GPU"], defined
