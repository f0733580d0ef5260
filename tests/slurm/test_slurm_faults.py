"""Slurm-side events reach Synergy: a node drained in Slurm moves its job (checkpoint, requeue,
resume elsewhere), a job cancelled in Slurm by someone else fails with Slurm's reason, a job
killed at its Slurm memory limit fails as OOM, and a restarted synergyd finds its Slurm jobs
(nothing launched twice, nothing lost)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster
from slurm_jobs import assert_exactly_once, records, slurm_jobs_of, start_daemon, train_command
from synergyd_harness import DaemonProcess, wait_for

from synergy.scheduler.daemon.profiles import NO_LIVE_PROFILING
from synergy.v1 import admin_pb2, common_pb2


def test_a_slurm_drain_moves_the_job_which_resumes_exactly(tmp_path: Path, slurm: SlurmCluster,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch)
    admin = d.admin()
    rec = tmp_path / "batches.txt"
    try:
        # profiler "auto", no known profile: our agent would profile it live; Slurm cannot resize
        # a task to each point, so it keeps the stand-in profile, and describe says why.
        a = admin.submit("a", gpus=1, working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt"), profiler="auto",
                         command=train_command(rec, "--samples", "64", "--epochs", "2", "--step-s", "0.1")).id
        assert any(NO_LIVE_PROFILING in t.reason for t in admin.describe(a).history)
        wait_for(lambda: len(records(rec)) >= 3, timeout=90, what=f"a to train ({admin.describe(a).state_reason})")
        first = admin.describe(a).placements[0].node_id
        slurm.scontrol("update", f"NodeName={first}", "State=DRAIN", "Reason=fan failure")
        wait_for(lambda: admin.describe(a).attempt == 2 and admin.state(a) == "running", timeout=60,
                 what=f"a to move ({admin.describe(a).state_reason})")
        info = admin.describe(a)
        assert info.placements[0].node_id != first
        assert any("fan failure" in t.reason for t in info.history), info.history
        wait_for(lambda: admin.state(a) == "succeeded", timeout=120,
                 what=f"a to finish ({admin.state(a)}: {admin.describe(a).state_reason})")
        assert_exactly_once(records(rec), samples=64, epochs=2)
        assert [j["nodes"] for j in slurm_jobs_of(slurm, d, a)] == [first, info.placements[0].node_id]
    finally:
        admin.close()
        d.terminate()


def test_scancel_from_outside_fails_the_job_with_slurms_reason(tmp_path: Path, slurm: SlurmCluster,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch)
    admin = d.admin()
    rec = tmp_path / "batches.txt"
    try:
        a = admin.submit("a", gpus=1, working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt"),
                         command=train_command(rec, "--samples", "400", "--epochs", "1", "--step-s", "0.1")).id
        wait_for(lambda: len(records(rec)) >= 2, timeout=90, what=f"a to train ({admin.describe(a).state_reason})")
        (sj,) = slurm_jobs_of(slurm, d, a)
        # describe names the Slurm job and shows Slurm's own figures for it, labelled so.
        task = wait_for(lambda: [t for t in admin.describe(a).tasks if t.usage.rss_bytes], timeout=20,
                        what="Slurm's usage figures")[0]
        assert task.backend_job == f"slurm {sj['job_id']}" and task.usage.sampled_by == "slurm"
        assert 10 * 2**20 < task.usage.rss_bytes < 2**31  # a PyTorch process, as Slurm's jobacct_gather sees it
        node = {n.node_id: n for n in admin.ListNodes(admin_pb2.ListNodesRequest()).nodes}[sj["nodes"]]
        assert list(node.backend_jobs) == [f"{a}=slurm {sj['job_id']}"] and node.telemetry.sampled_by == "slurm"
        assert f"{a} (slurm {sj['job_id']})" in cli(d, "nodes")  # `synergy nodes` shows it
        # `synergy logs` reads the task's log in the shared work dir, as an agent would relay it.
        assert f"synergy: job {a} attempt 1 rank 0: Slurm job {sj['job_id']} on {sj['nodes']}" in cli(d, "logs", str(a))
        slurm.run("scancel", str(sj["job_id"]))
        wait_for(lambda: admin.state(a) == "failed", timeout=60, what=f"a to fail ({admin.describe(a).state_reason})")
        reason = admin.describe(a).state_reason
        assert f"Slurm job {sj['job_id']} CANCELLED" in reason and "cancelled in Slurm, not by Synergy" in reason
    finally:
        admin.close()
        d.terminate()


def cli(d: DaemonProcess, *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "synergy.scheduler.cli.main", "--state-dir", str(d.state_dir), *argv],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "250"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_job_over_its_slurm_memory_limit_fails_as_oom(tmp_path: Path, slurm: SlurmCluster,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch)
    admin = d.admin()
    hog = (sys.executable, "-c", "import time; x = [bytearray(2**20) for _ in range(8 * 1024)]; time.sleep(60)")
    try:
        a = admin.submit("hog", gpus=1, working_dir=str(tmp_path), command=hog).id
        wait_for(lambda: admin.state(a) == "failed", timeout=60, what=f"the hog to fail ({admin.describe(a).state_reason})")
        reason = admin.describe(a).state_reason
        assert "killed by its memory limit (OOM)" in reason and "OUT_OF_MEMORY" in reason, reason
    finally:
        admin.close()
        d.terminate()


def test_a_restarted_synergyd_finds_its_slurm_jobs_and_launches_nothing_twice(
        tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch)
    admin = d.admin()
    rec = tmp_path / "batches.txt"
    try:
        a = admin.submit("a", gpus=1, working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt"),
                         command=train_command(rec, "--samples", "64", "--epochs", "2", "--step-s", "0.1")).id
        wait_for(lambda: len(records(rec)) >= 3, timeout=90, what=f"a to train ({admin.describe(a).state_reason})")
        admin.close()
        d.kill()  # kill -9: no goodbye
        d.start()
        admin = d.admin()
        wait_for(lambda: admin.state(a) == "succeeded", timeout=120,
                 what=f"a to finish ({admin.state(a)}: {admin.describe(a).state_reason})")
        assert admin.describe(a).attempt == 1
        assert [j["name"] for j in slurm_jobs_of(slurm, d, a)] == [f"synergy.{a}.1.0"]  # one Slurm job, ever
        assert_exactly_once(records(rec), samples=64, epochs=2)
    finally:
        admin.close()
        d.terminate()


def test_a_launch_slurm_keeps_pending_is_requeued_with_slurms_reason(tmp_path: Path, slurm: SlurmCluster,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch, "--slurm-pending-s", "2")
    admin = d.admin()
    n0, n1 = slurm.nodes
    try:
        wait_for(lambda: len(admin.ListNodes(admin_pb2.ListNodesRequest()).nodes) == 2, what="both nodes")
        admin.CordonNode(admin_pb2.CordonNodeRequest(node_id=n1, reason="test: one node"))
        # Work Synergy does not know about takes n0 whole (an admin's job, say): Slurm holds ours back.
        slurm.run("sbatch", f"--partition={slurm.partition}", f"--nodelist={n0}", "--exclusive", "--mem=64M",
                  "--job-name=admin-maintenance", f"--output={tmp_path / 'm.out'}", "--wrap=sleep 120")
        a = admin.submit("a", gpus=1, working_dir=str(tmp_path), command=(sys.executable, "-c", "pass")).id
        info = wait_for(lambda: (i := admin.describe(a)).preemptions >= 1 and i, timeout=60,
                        what=f"a to be requeued ({admin.describe(a).state_reason})")
        why = " ".join(t.reason for t in info.history)
        assert "Slurm kept job" in why and "pending for over 2 s (Resources)" in why, why
        (sj, *_) = slurm_jobs_of(slurm, d, a)
        assert sj["job_state"] == "CANCELLED"  # withdrawn from Slurm's queue, not left to start later
    finally:
        admin.close()
        d.terminate()


def test_a_node_slurm_loses_is_lost_to_synergy_and_its_job_runs_elsewhere(tmp_path: Path, slurm: SlurmCluster,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch)
    admin = d.admin()
    rec = tmp_path / "batches.txt"
    try:
        a = admin.submit("a", gpus=1, working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt"),
                         command=train_command(rec, "--samples", "64", "--epochs", "1", "--step-s", "0.1")).id
        wait_for(lambda: len(records(rec)) >= 3, timeout=90, what=f"a to train ({admin.describe(a).state_reason})")
        first = admin.describe(a).placements[0].node_id
        slurm.scontrol("update", f"NodeName={first}", "State=DOWN", "Reason=power supply")
        wait_for(lambda: admin.describe(a).attempt == 2 and admin.state(a) == "running", timeout=60,
                 what=f"a to run elsewhere ({admin.describe(a).state_reason})")
        info = admin.describe(a)
        assert info.placements[0].node_id != first
        assert any(f"node {first} lost" in t.reason for t in info.history), info.history
        nodes = {n.node_id: n for n in admin.ListNodes(admin_pb2.ListNodesRequest()).nodes}
        assert common_pb2.NodeState.Name(nodes[first].state) == "NODE_STATE_LOST"
        wait_for(lambda: admin.state(a) == "succeeded", timeout=120,
                 what=f"a to finish ({admin.state(a)}: {admin.describe(a).state_reason})")
    finally:
        admin.close()
        d.terminate()
