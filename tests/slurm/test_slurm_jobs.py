"""Placement on a real Slurm: each rank of a Synergy job is a Slurm job holding exactly the round's
share (read back from Slurm and from inside the process), a resize is a checkpoint and a new
Slurm job, and the one-line SynergyIterator wrap trains every sample once per epoch throughout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster
from slurm_jobs import (assert_exactly_once, finished, memory_limit_mb, records, slurm_jobs_of, start_daemon,
                        task_pid, train_command)
from synergyd_harness import wait_for

from synergy.v1 import admin_pb2

SLEEPER = (sys.executable, "-c", "import time; time.sleep(600)")


def test_a_job_is_placed_as_a_slurm_job_and_a_resize_is_a_new_slurm_job(
        tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch, "--mechanism", "tune")
    admin = d.admin()
    n0, n1 = slurm.nodes
    rec, aff = tmp_path / "batches.txt", tmp_path / "affinity.txt"
    try:
        wait_for(lambda: len(admin.ListNodes(admin_pb2.ListNodesRequest()).nodes) == 2, what="both nodes")
        # One node only, so that a second job must share it with the first.
        admin.CordonNode(admin_pb2.CordonNodeRequest(node_id=n1, reason="test: one node"))
        a = admin.submit("a", gpus=1, model="resnet18", working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt"),
                         command=train_command(rec, "--samples", "64", "--epochs", "2", "--step-s", "0.15",
                                               "--affinity", str(aff))).id
        wait_for(lambda: len(records(rec)) >= 3, timeout=90, what=f"job a to train ({admin.describe(a).state_reason})")
        info = admin.describe(a)
        (place,) = info.placements
        (sj,) = [j for j in slurm_jobs_of(slurm, d, a) if j["job_state"] == "RUNNING"]
        # Slurm holds what the round decided: the node, whole CPUs, memory, one GPU.
        assert place.node_id == n0 and sj["nodes"] == n0 and sj["name"] == f"synergy.{a}.1.0"
        assert sj["cpus"] == int(place.cpus) == 2 and sj["memory_per_node"] == int(place.mem_gb * 1024)
        assert sj["tres_per_node"] == "gres:gpu:1"
        pid = wait_for(lambda: task_pid(a, 1), what="a's process")
        assert memory_limit_mb(pid) == int(place.mem_gb * 1024)  # Slurm's cgroup, seen from the process
        wait_for(lambda: aff.exists() and aff.read_text().split(), what="the affinity record")
        assert aff.read_text().splitlines()[0].split()[1] == "2"  # the process runs on both cores

        # A second job: tune halves a's CPUs. Slurm cannot resize a running job, so a checkpoints
        # and exits 75 and runs on as attempt 2 in a new Slurm job holding one CPU.
        b = admin.submit("b", gpus=1, model="resnet18", command=SLEEPER, working_dir=str(tmp_path)).id
        wait_for(lambda: admin.describe(a).attempt == 2 and admin.state(a) == "running", timeout=60,
                 what=f"a relaunched with its new share ({admin.describe(a).state_reason})")
        wait_for(lambda: admin.state(b) == "running", timeout=30, what="b to run")
        info = admin.describe(a)
        assert [p.cpus for p in info.placements] == [1.0]
        assert any("resized to" in t.reason and "a new Slurm job" in t.reason for t in info.history), info.history
        sj2 = wait_for(lambda: [j for j in slurm_jobs_of(slurm, d, a) if j["name"] == f"synergy.{a}.2.0"
                                 and j["job_state"] == "RUNNING"], what="a's second Slurm job")[0]
        assert sj2["cpus"] == 1 and sj2["memory_per_node"] == int(info.placements[0].mem_gb * 1024)
        assert memory_limit_mb(wait_for(lambda: task_pid(a, 2), what="a's new process")) == sj2["memory_per_node"]
        finished(admin, a)
        first = slurm_jobs_of(slurm, d, a)[0]
        assert first["job_state"] == "FAILED" and first["exit_code"] >> 8 == 75  # checkpointed, restart me
        rows = records(rec)
        assert {r.attempt for r in rows} == {1, 2}
        assert_exactly_once(rows, samples=64, epochs=2)
        cores = {int(line.split()[1]) for line in aff.read_text().splitlines()}
        assert cores == {2, 1}  # seen from inside: both cores, then the one Slurm bound attempt 2 to
    finally:
        admin.close()
        d.terminate()


def test_a_two_node_job_is_one_slurm_job_per_rank_meeting_at_rank_0s_host(
        tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch)
    admin = d.admin()
    rec = tmp_path / "batches.txt"
    try:
        wait_for(lambda: len(admin.ListNodes(admin_pb2.ListNodesRequest()).nodes) == 2, what="both nodes")
        # Four GPUs: both nodes, one rank each; the ranks all-reduce over gloo at the contract's rendezvous.
        a = admin.submit("wide", gpus=4, working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt"),
                         command=train_command(rec, "--samples", "96", "--epochs", "1", "--step-s", "0.05",
                                               "--elastic", "--gloo")).id
        finished(admin, a)
        ranks = {j["name"]: j["nodes"] for j in slurm_jobs_of(slurm, d, a)}
        assert sorted(ranks) == [f"synergy.{a}.1.0", f"synergy.{a}.1.1"] and sorted(ranks.values()) == slurm.nodes
        rows = records(rec)
        assert {r.rank for r in rows} == {0, 1}
        assert sorted(i for r in rows for i in r.ids) == list(range(96))  # the two ranks split the epoch
    finally:
        admin.close()
        d.terminate()
