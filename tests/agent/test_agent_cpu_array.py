"""CODA's CPU array in synergyd, end to end: a real synergyd, real synergy-agent processes (one
with fake GPUs, one without any), real jobs (examples/cpu_stress, sleepers). Only GPUs are fake.

* a CPU-only job borrows idle CPUs of a GPU node, and gives them back through the lease path
  (STOP, requeue) at the round a training job needs them; the training job gets at least its
  GPU-proportional share, and the CPU job runs again when the room comes back;
* `--borrow-fraction 0`: a CPU-only job never runs on a GPU node, only on a GPU-less one;
* a GPU-less agent (`--fake-gpus 0`) registers as a CPU node that `synergy nodes` lists,
  where training never lands and CPU-only jobs share CPUs by DRF between `spec.user`s.

Nothing here asserts a timing: conditions are polled with generous deadlines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import grpc
import pytest

from agent_harness import AgentProcess, cpus_allowed, is_root_with_v1
from cli_runner import run_cli
from synergyd_harness import Admin, DaemonProcess, history, wait_for
from synergy.v1 import admin_pb2

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the cgroup layer is unit-tested without")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cpu_stress"
# Niced and small: they burn CPU on purpose, and other tests share this machine's cores.
STRESS = ("nice", "-n", "19", sys.executable, "-u", str(EXAMPLES / "stress.py"), "--mb", "4")
TRAIN = ("nice", "-n", "19", sys.executable, "-u", str(EXAMPLES / "train_reporter.py"), "--mb", "4")
SLEEPER = ("nice", "-n", "19", sys.executable, "-u", "-c",
           "import os, time; print('PID', os.getpid(), flush=True); time.sleep(600)")


def _wait(predicate: Callable[[], Any], what: str, admin: Admin, agents: list[AgentProcess],
          jobs: list[int], timeout: float = 60) -> Any:
    """wait_for, saying on failure what the daemon and the agents saw."""
    try:
        return wait_for(predicate, timeout=timeout, what=what)
    except AssertionError as exc:
        seen = "\n".join(f"job {j}: {admin.state(j)} ({admin.describe(j).state_reason}; "
                         f"waiting: {admin.describe(j).waiting_reason})" for j in jobs)
        logs = "\n".join(f"agent {a.node_id}:\n{a.log_text()[-2000:]}" for a in agents)
        raise AssertionError(f"{exc}\n{seen}\n{logs}") from None


def _nodes(info: admin_pb2.JobInfo) -> list[str]:
    return [p.node_id for p in info.placements]


def test_borrowed_cpus_go_back_to_a_training_job_through_the_lease_path(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "state").start()
    # One fake GPU and two CPUs: the training job's GPU-proportional share is both of them.
    g0 = AgentProcess(d, tmp_path / "g0", "g0", "--cpus", "0-1", "--memory", "2G", fake_gpus=1)
    admin = d.admin()
    try:
        g0.start()
        cpu = admin.submit("stress", gpus=0, command=STRESS, kind="cpu", cpus_hint=1, mem_gb_hint=0.25,
                           user="carol", working_dir=str(tmp_path)).id
        _wait(lambda: admin.state(cpu) == "running", "the CPU job to borrow g0's idle CPUs", admin, [g0], [cpu])
        assert [(p.node_id, p.gpus, p.cpus) for p in admin.describe(cpu).placements] == [("g0", 0, 1.0)]
        pid = g0.task_pid(cpu)
        assert len(cpus_allowed(pid).split(",")) == 1 and "-" not in cpus_allowed(pid)  # one core of 0-1

        # Needs both CPUs: the borrowed one goes back at the next round.
        train = admin.submit("train", gpus=1, command=TRAIN, cpus_hint=2, mem_gb_hint=0.5,
                             working_dir=str(tmp_path)).id
        _wait(lambda: admin.state(train) == "running" and "TPUT" in g0.task_log(train),
              "the training job to run", admin, [g0], [cpu, train], timeout=90)
        info = admin.describe(train)
        assert _nodes(info) == ["g0"] and info.placements[0].cpus >= info.proportional_share.cpus == 2.0
        back = admin.describe(cpu)
        assert admin.state(cpu) == "queued" and "preempted" in history(back), history(back)
        assert "waiting for 1 CPUs" in back.waiting_reason, back.waiting_reason
        train_pid = _wait(lambda: next((t.pid for t in admin.describe(train).tasks if t.pid), None),
                          "the training job's pid", admin, [g0], [cpu, train])
        assert cpus_allowed(train_pid) == "0-1"  # both cores: the borrowed one is back

        # The room comes back: the CPU job runs again (a new attempt), on g0.
        admin.CancelJob(admin_pb2.CancelJobRequest(job=str(train)))
        _wait(lambda: admin.state(cpu) == "running" and admin.describe(cpu).attempt == 2,
              "the CPU job to run again", admin, [g0], [cpu, train], timeout=90)
        assert _nodes(admin.describe(cpu)) == ["g0"]
    finally:
        admin.close()
        g0.stop()
        d.kill()


def test_borrow_fraction_zero_keeps_cpu_jobs_off_gpu_nodes(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    d = DaemonProcess(tmp_path / "state", "--borrow-fraction", "0", "--no-trim-training").start()
    g0 = AgentProcess(d, tmp_path / "g0", "g0", "--cpus", "0-1", "--memory", "2G", fake_gpus=1)
    c0 = AgentProcess(d, tmp_path / "c0", "c0", "--cpus", "0-1", "--memory", "2G", fake_gpus=0)
    admin = d.admin()
    try:
        status = run_cli(capsys, "--state-dir", str(d.state_dir), "status")
        assert status.code == 0 and "CPU-only jobs on GPU-less nodes only" in status.out, status.out
        st = admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest())
        assert (st.cpu_array.borrow_fraction, st.cpu_array.trim_training) == (0.0, False)
        started = next(json.loads(x) for x in d.log_text().splitlines() if '"synergyd.started"' in x)
        assert (started["borrow_fraction"], started["trim_training"]) == (0.0, False), started

        g0.start()
        cpu = admin.submit("prep", gpus=0, command=SLEEPER, kind="cpu", cpus_hint=1, mem_gb_hint=0.25,
                           working_dir=str(tmp_path)).id
        rounds = admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest()).round_index
        _wait(lambda: admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest()).round_index >= rounds + 6,
              "six rounds", admin, [g0], [cpu])
        info = admin.describe(cpu)
        assert admin.state(cpu) == "queued" and "running" not in history(info), history(info)
        assert "no schedulable node" in info.waiting_reason or "0 CPUs" in info.waiting_reason, info.waiting_reason

        c0.start()  # a GPU-less node: the CPU array's own
        _wait(lambda: admin.state(cpu) == "running", "the CPU job to run on the CPU node", admin, [g0, c0], [cpu])
        assert _nodes(admin.describe(cpu)) == ["c0"]
    finally:
        admin.close()
        c0.stop()
        g0.stop()
        d.kill()


def test_a_gpu_less_node_hosts_cpu_jobs_by_drf_between_users_and_never_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = DaemonProcess(tmp_path / "state").start()
    c0 = AgentProcess(d, tmp_path / "c0", "c0", "--cpus", "0-1", "--memory", "2G", fake_gpus=0)
    admin = d.admin()
    jobs: list[int] = []

    def cpu_job(name: str, user: str) -> int:
        jobs.append(admin.submit(name, gpus=0, command=SLEEPER, kind="cpu", cpus_hint=0.5, mem_gb_hint=0.25,
                                 user=user, working_dir=str(tmp_path)).id)
        return jobs[-1]

    try:
        c0.start()
        node = next(n for n in admin.ListNodes(admin_pb2.ListNodesRequest()).nodes if n.node_id == "c0")
        assert (node.allocatable.gpus, node.allocatable.cpus) == (0, 2)
        listed = run_cli(capsys, "--state-dir", str(d.state_dir), "nodes")
        line = next(x for x in listed.out.splitlines() if x.lstrip().startswith("c0"))
        assert "0/0" in line, listed.out

        with pytest.raises(grpc.RpcError) as bad:  # the shared rule, the field's proto path first
            cpu_job("x", "two words")
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert bad.value.details().startswith("spec.user: 'two words' must start with a letter"), bad.value.details()
        train = admin.submit("train", gpus=1, command=TRAIN, working_dir=str(tmp_path)).id
        jobs.append(train)
        # alice fills the node's two CPUs; then alice and bob each queue one more job, alice first.
        first = [cpu_job(f"a{i}", "alice") for i in range(1, 5)]
        _wait(lambda: all(admin.state(j) == "running" for j in first), "alice's four jobs to run",
              admin, [c0], jobs)
        a5 = cpu_job("a5", "alice")
        b1 = cpu_job("b1", "bob")
        _wait(lambda: admin.describe(b1).waiting_reason.startswith("waiting for 0.5 CPUs"),
              "bob's job to wait for room", admin, [c0], jobs)
        listing = run_cli(capsys, "--state-dir", str(d.state_dir), "jobs", "--all")
        assert any(" b1 " in x and " bob " in x for x in listing.out.splitlines()), listing.out
        described = run_cli(capsys, "--state-dir", str(d.state_dir), "describe", "a5")
        assert any(x.split()[:2] == ["user", "alice"] for x in described.out.splitlines()), described.out

        # One of alice's jobs ends: DRF gives the room to bob (dominant share 0 against alice's
        # 3/4), although alice's a5 has waited longer.
        admin.CancelJob(admin_pb2.CancelJobRequest(job=str(first[0])))
        _wait(lambda: admin.state(b1) == "running", "bob's job to get the freed CPUs", admin, [c0], jobs)
        assert _nodes(admin.describe(b1)) == ["c0"]
        rounds = admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest()).round_index
        _wait(lambda: admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest()).round_index >= rounds + 4,
              "four more rounds", admin, [c0], jobs)
        assert admin.state(a5) == "queued"
        # Training never lands on a node without GPUs.
        info = admin.describe(train)
        assert admin.state(train) == "queued" and "running" not in history(info), history(info)
        assert info.waiting_reason == "no schedulable node: only GPU-less nodes (1), which run CPU-only jobs"
    finally:
        admin.close()
        c0.stop()
        d.kill()
