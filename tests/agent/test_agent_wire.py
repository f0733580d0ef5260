"""The agent's telemetry and CODA's eliminator as the daemon shows them: a real synergyd, a real
synergy-agent, real jobs (examples/cpu_stress), the CLI in-process. Only GPUs are fake.

Nothing here asserts a timing: conditions are polled with generous deadlines.
"""

from __future__ import annotations

import re
import sys
import urllib.request
from pathlib import Path

import pytest

from agent_harness import AgentProcess, is_root_with_v1
from cli_runner import run_cli
from synergyd_harness import DaemonProcess, wait_for
from synergy.v1 import admin_pb2

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the cgroup layer is unit-tested without")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cpu_stress"
# Niced: they burn CPU on purpose, and other tests' daemons share this machine's cores.
STRESS = ("nice", "-n", "19", sys.executable, "-u", str(EXAMPLES / "stress.py"), "--mb", "16")
TRAIN = ("nice", "-n", "19", sys.executable, "-u", str(EXAMPLES / "train_reporter.py"), "--mb", "8")


def _wait(predicate: object, what: str, admin: object, agent: AgentProcess, job: int, timeout: float = 60) -> object:
    """wait_for, saying on failure what the daemon and the agent saw."""
    try:
        return wait_for(predicate, timeout=timeout, what=what)  # type: ignore[arg-type]
    except AssertionError as exc:
        info = admin.describe(job)  # type: ignore[attr-defined]
        raise AssertionError(f"{exc}\njob {job}: {info.state_reason}\ntasks: {list(info.tasks)}\n"
                             f"agent log:\n{agent.log_text()[-3000:]}") from None


def _node(admin: object, node_id: str) -> admin_pb2.NodeInfo:
    nodes = admin.ListNodes(admin_pb2.ListNodesRequest()).nodes  # type: ignore[attr-defined]
    return next(n for n in nodes if n.node_id == node_id)


def test_heartbeats_carry_task_and_node_usage_to_nodes_and_describe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = DaemonProcess(tmp_path / "state").start()
    agent = AgentProcess(d, tmp_path / "work", "n0", "--cpus", "0-1", "--memory", "2G", fake_gpus=0)
    admin = d.admin()
    try:
        agent.start()
        job = admin.submit("stress", gpus=0, command=STRESS, kind="cpu", cpus_hint=1, mem_gb_hint=0.5,
                           working_dir=str(tmp_path)).id

        def task_usage() -> admin_pb2.TaskInfo | None:
            tasks = admin.describe(job).tasks
            busy = tasks and tasks[0].usage.cpu_cores > 0.3 and tasks[0].usage.mem_bandwidth.source
            return tasks[0] if busy else None

        task = _wait(task_usage, "the usage in describe", admin, agent, job)
        assert task.usage.rss_bytes > 16 * 1024**2 and task.usage.mem_bandwidth.source == "estimate"
        assert task.usage.mem_bandwidth.gb_per_s > 0
        node = wait_for(lambda: (n := _node(admin, "n0")).telemetry.usage.cpu_cores > 0.3 and n, timeout=60,
                        what="the node's usage in ListNodes")
        t = node.telemetry
        assert t.usage.mem_bandwidth.source == "estimate" and t.peak_mem_bandwidth.source == "estimate"
        assert 0 < t.usage.mem_bandwidth.gb_per_s and t.peak_mem_bandwidth.gb_per_s > 0
        assert t.usage.rss_bytes > 0

        nodes = run_cli(capsys, "--state-dir", str(d.state_dir), "nodes")
        assert nodes.code == 0, nodes.err
        line = next(x for x in nodes.out.splitlines() if x.lstrip().startswith("n0"))
        assert "GB/s (estimate)" in line and "%" in line, nodes.out
        desc = run_cli(capsys, "--state-dir", str(d.state_dir), "describe", str(job))
        assert desc.code == 0, desc.err
        row = next(x for x in desc.out.splitlines() if " n0 " in x and "running" in x)
        assert "GB/s (estimate)" in row and re.search(r"\d+(\.\d+)?M ", row), desc.out
    finally:
        admin.close()
        agent.stop()
        d.kill()


def test_coda_throttles_the_bandwidth_heavy_cpu_job_beside_a_reporting_training_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Thresholds set for this 2-core machine (what the eliminator decides on is the point, not how much
    the numbers move): contention at 30 % of the calibrated peak, "slowed" at 1 % below the baseline."""
    d = DaemonProcess(tmp_path / "state").start()
    agent = AgentProcess(d, tmp_path / "work", "n0", "--cpus", "0-1", "--memory", "2G",
                         "--contention-threshold", "0.3", "--contention-throughput-drop", "0.01", fake_gpus=1)
    admin = d.admin()
    try:
        agent.start()
        train = admin.submit("train", gpus=1, command=TRAIN, cpus_hint=1, mem_gb_hint=0.5,
                             working_dir=str(tmp_path)).id
        wait_for(lambda: "TPUT" in agent.task_log(train), timeout=60,
                 what=f"the training job to report throughput ({admin.describe(train).state_reason})")
        stress = admin.submit("stress", gpus=0, command=STRESS, kind="cpu", cpus_hint=1, mem_gb_hint=0.5,
                              working_dir=str(tmp_path)).id

        def throttled() -> admin_pb2.TaskInfo | None:
            tasks = admin.describe(stress).tasks
            return tasks[0] if tasks and tasks[0].HasField("throttle") else None

        task = wait_for(throttled, timeout=90, what=f"job {stress} to be throttled\n{agent.log_text()[-3000:]}")
        assert task.throttle.level >= 1 and task.throttle.action.startswith("cpu quota")
        assert "node bandwidth" in task.throttle.reason and task.throttle.since_unix_s > 0
        # the contender is throttled for the bandwidth it was measured to use, never on its first
        # sample (no rate yet: "uses the most (0.00 GB/s)", what the runs showed)
        used = re.search(r"uses the most \((\S+) GB/s\)", task.throttle.reason)
        assert used and float(used[1]) > 0, task.throttle.reason
        assert admin.describe(train).tasks[0].HasField("throttle") is False  # the training job is never held
        desc = run_cli(capsys, "--state-dir", str(d.state_dir), "describe", str(stress))
        assert desc.code == 0 and "cpu quota" in desc.out and "Throttled" in desc.out, desc.out
        wait_for(lambda: _node(admin, "n0").throttled_tasks == 1, timeout=30, what="the node's throttled count")
        wide = run_cli(capsys, "--state-dir", str(d.state_dir), "nodes", "--wide")
        assert wide.code == 0 and "THROTTLED" in wide.out, wide.out
        assert "contention.throttle" in agent.log_text()
        scraped = urllib.request.urlopen(f"http://{d.metrics_address}/metrics", timeout=10).read().decode()
        assert 'synergyd_node_throttled_tasks{node="n0"} 1.0' in scraped

        admin.CancelJob(admin_pb2.CancelJobRequest(job=str(stress)))
        wait_for(lambda: _node(admin, "n0").throttled_tasks == 0, timeout=60,
                 what="the hold to go once the contender ended")
        assert admin.state(train) == "running"
    finally:
        admin.close()
        agent.stop()
        d.kill()
