"""Slurm-side events reach Synergy: a node drained in Slurm moves its job (checkpoint, requeue,
resume elsewhere), a node Slurm loses is lost to Synergy, a job cancelled in Slurm by someone
else fails with Slurm's reason, a job killed at its Slurm memory limit fails as OOM, a launch
Slurm keeps pending is requeued with Slurm's reason, and a restarted synergyd finds its Slurm
jobs (nothing launched twice, nothing lost)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from slurm_cluster import SlurmCluster
from slurm_jobs import assert_exactly_once, finished, records, slurm_jobs_of, start_daemon, training
from synergyd_harness import Admin, DaemonProcess, wait_for

from synergy.v1 import admin_pb2, common_pb2


@pytest.fixture
def daemon(tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DaemonProcess, Admin]]:
    """synergyd --backend slurm and an admin client."""
    d = start_daemon(tmp_path, slurm, monkeypatch)
    admin = d.admin()
    yield d, admin
    admin.close()
    d.terminate()


def cli(d: DaemonProcess, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "synergy.scheduler.cli.main", "--state-dir", str(d.state_dir), *argv],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "250"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def nodes(admin: Admin) -> dict[str, admin_pb2.NodeInfo]:
    return {n.node_id: n for n in admin.ListNodes(admin_pb2.ListNodesRequest()).nodes}


def test_a_slurm_drain_moves_the_job_which_resumes_exactly(slurm: SlurmCluster, daemon, tmp_path: Path) -> None:
    d, admin = daemon
    # (profiler none: a measured profile could change its share, a new Slurm job, before the drain;
    # test_slurm_jobs.py shows the profile measured under Slurm)
    a, rec = training(admin, tmp_path, "--samples", "64", "--epochs", "2", "--step-s", "0.1")
    first = admin.describe(a).placements[0].node_id
    slurm.scontrol("update", f"NodeName={first}", "State=DRAIN", "Reason=fan failure")
    wait_for(lambda: admin.describe(a).attempt == 2 and admin.state(a) == "running", timeout=60,
             what=f"a to move ({admin.describe(a).state_reason})")
    info = admin.describe(a)
    assert info.placements[0].node_id != first
    assert any("fan failure" in t.reason for t in info.history), info.history
    finished(admin, a)
    assert_exactly_once(records(rec), samples=64, epochs=2)
    assert [j["nodes"] for j in slurm_jobs_of(slurm, d, a)] == [first, info.placements[0].node_id]


def test_a_node_slurm_loses_is_lost_to_synergy_and_its_job_runs_elsewhere(slurm: SlurmCluster, daemon,
                                                                         tmp_path: Path) -> None:
    d, admin = daemon
    a, _ = training(admin, tmp_path, "--samples", "64", "--epochs", "1", "--step-s", "0.1")
    first = admin.describe(a).placements[0].node_id
    slurm.scontrol("update", f"NodeName={first}", "State=DOWN", "Reason=power supply")
    wait_for(lambda: admin.describe(a).attempt == 2 and admin.state(a) == "running", timeout=60,
             what=f"a to run elsewhere ({admin.describe(a).state_reason})")
    info = admin.describe(a)
    assert info.placements[0].node_id != first
    assert any(f"node {first} lost" in t.reason for t in info.history), info.history
    assert common_pb2.NodeState.Name(nodes(admin)[first].state) == "NODE_STATE_LOST"
    finished(admin, a)


def test_scancel_from_outside_fails_the_job_with_slurms_reason(slurm: SlurmCluster, daemon, tmp_path: Path) -> None:
    d, admin = daemon
    a, _ = training(admin, tmp_path, "--samples", "400", "--epochs", "1", "--step-s", "0.1")
    (sj,) = slurm_jobs_of(slurm, d, a)
    # describe names the Slurm job and shows Slurm's own figures for it, labelled so.
    task = wait_for(lambda: [t for t in admin.describe(a).tasks if t.usage.rss_bytes], timeout=20,
                    what="Slurm's usage figures")[0]
    assert task.backend_job == f"slurm {sj['job_id']}" and task.usage.sampled_by == "slurm"
    assert 10 * 2**20 < task.usage.rss_bytes < 2**31  # a PyTorch process, as Slurm's jobacct_gather sees it
    node = nodes(admin)[sj["nodes"]]
    assert list(node.backend_jobs) == [f"{a}=slurm {sj['job_id']}"] and node.telemetry.sampled_by == "slurm"
    assert f"{a} (slurm {sj['job_id']})" in cli(d, "nodes")  # `synergy nodes` shows it
    # `synergy logs` reads the task's log in the shared work dir, as an agent would relay it.
    assert f"synergy: job {a} attempt 1 rank 0: Slurm job {sj['job_id']} on {sj['nodes']}" in cli(d, "logs", str(a))
    slurm.run("scancel", str(sj["job_id"]))
    wait_for(lambda: admin.state(a) == "failed", timeout=60, what=f"a to fail ({admin.describe(a).state_reason})")
    reason = admin.describe(a).state_reason
    assert f"Slurm job {sj['job_id']} CANCELLED" in reason and "cancelled in Slurm, not by Synergy" in reason


def test_a_job_over_its_slurm_memory_limit_fails_as_oom(daemon, tmp_path: Path) -> None:
    d, admin = daemon
    hog = (sys.executable, "-c", "import time; x = [bytearray(2**20) for _ in range(8 * 1024)]; time.sleep(60)")
    a = admin.submit("hog", gpus=1, working_dir=str(tmp_path), command=hog).id
    wait_for(lambda: admin.state(a) == "failed", timeout=60, what=f"the hog to fail ({admin.describe(a).state_reason})")
    reason = admin.describe(a).state_reason
    assert "killed by its memory limit (OOM)" in reason and "OUT_OF_MEMORY" in reason, reason


def test_a_restarted_synergyd_finds_its_slurm_jobs_and_launches_nothing_twice(slurm: SlurmCluster, daemon,
                                                                             tmp_path: Path) -> None:
    d, admin = daemon
    a, rec = training(admin, tmp_path, "--samples", "64", "--epochs", "2", "--step-s", "0.1")
    d.kill()  # kill -9: no goodbye
    d.start()
    admin = d.admin()
    try:
        finished(admin, a)
        assert admin.describe(a).attempt == 1
    finally:
        admin.close()
    assert [j["name"] for j in slurm_jobs_of(slurm, d, a)] == [f"synergy.{a}.1.0"]  # one Slurm job, ever
    assert_exactly_once(records(rec), samples=64, epochs=2)


def test_a_launch_slurm_keeps_pending_is_requeued_with_slurms_reason(slurm: SlurmCluster, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch, "--slurm-pending-s", "2")
    admin = d.admin()
    n0, n1 = slurm.nodes
    try:
        wait_for(lambda: len(nodes(admin)) == 2, what="both nodes")
        admin.CordonNode(admin_pb2.CordonNodeRequest(node_id=n1, reason="test: one node"))
        # Work Synergy does not know about takes n0 whole (an admin's job, say): Slurm holds ours back.
        slurm.run("sbatch", f"--partition={slurm.partition}", f"--nodelist={n0}", "--exclusive", "--mem=64M",
                  "--job-name=admin-maintenance", f"--output={tmp_path / 'm.out'}", "--wrap=sleep 120")
        a = admin.submit("a", gpus=1, working_dir=str(tmp_path), command=(sys.executable, "-c", "pass")).id
        info = wait_for(lambda: (i := admin.describe(a)).preemptions >= 1 and i, timeout=60,
                        what=f"a to be requeued ({admin.describe(a).state_reason})")
        why = " ".join(t.reason for t in info.history)
        assert '"event":"slurm.foreign_job"' in d.log_text() and "admin-maintenance" in d.log_text()
        assert "Slurm kept job" in why and "pending for over 2 s (" in why, why  # (Slurm's reason: Resources)
        (sj, *_) = slurm_jobs_of(slurm, d, a)
        assert sj["job_state"] == "CANCELLED"  # withdrawn from Slurm's queue, not left to start later
    finally:
        admin.close()
        d.terminate()
