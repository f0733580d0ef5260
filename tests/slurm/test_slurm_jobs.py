"""Placement on a real Slurm: each rank of a Synergy job is a Slurm job holding exactly the round's
share (read back from Slurm and from inside the process), a resize is a checkpoint and a new
Slurm job, the job's profile is measured at the CPUs each of its Slurm jobs held, and the
one-line SynergyIterator wrap trains every sample once per epoch throughout."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import SlurmCluster
from slurm_jobs import (assert_exactly_once, finished, memory_limit_mb, records, slurm_jobs_of, start_daemon,
                        task_pid, train_command)
from synergyd_harness import Admin, DaemonProcess, wait_for

from synergy.scheduler.backends.slurm.mapping import slurm_cpus
from synergy.scheduler.daemon.profiles import MEASURING_IN_FORCE, PROFILED_IN_FORCE
from synergy.scheduler.daemon.store import open_store
from synergy.v1 import admin_pb2

SLEEPER = (sys.executable, "-c", "import time; time.sleep(600)")


def settled(admin: Admin, slurm: SlurmCluster, d: DaemonProcess, job: int) -> tuple[Any, dict[str, Any]] | None:
    """(describe, Slurm job) once the job's current attempt runs in a Slurm job holding exactly the
    round's share (None before: a decided resize not carried out yet)."""
    info = admin.describe(job)
    if admin.state(job) != "running" or len(info.placements) != 1:
        return None
    place = info.placements[0]
    sj = [j for j in slurm_jobs_of(slurm, d, job) if j["name"] == f"synergy.{job}.{info.attempt}.0"
          and j["job_state"] == "RUNNING" and j["cpus"] == slurm_cpus(place.cpus)
          and j["memory_per_node"] == int(place.mem_gb * 1024)]
    return (info, sj[0]) if sj else None


def test_a_job_is_placed_profiled_and_resized_as_slurm_jobs(
        tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch, "--mechanism", "tune")
    admin = d.admin()
    n0, n1 = slurm.nodes
    rec, aff = tmp_path / "batches.txt", tmp_path / "affinity.txt"
    try:
        wait_for(lambda: len(admin.ListNodes(admin_pb2.ListNodesRequest()).nodes) == 2, what="both nodes")
        # One node only, so that a second job must share it with the first.
        admin.CordonNode(admin_pb2.CordonNodeRequest(node_id=n1, reason="test: one node"))
        # No model, no profile: our agent would profile it under a profiling lease; under Slurm
        # it runs with the stand-in and each of its Slurm jobs measures the CPUs it holds.
        a = admin.submit("a", gpus=1, task="image", profiler="auto", working_dir=str(tmp_path),
                         checkpoint_dir=str(tmp_path / "ckpt"),
                         command=train_command(rec, "--samples", "128", "--epochs", "2", "--step-s", "0.15",
                                               "--affinity", str(aff))).id
        assert admin.describe(a).profile_source.startswith("zoo:resnet18 (stand-in")
        assert any(MEASURING_IN_FORCE in t.reason for t in admin.describe(a).history), admin.describe(a).history
        wait_for(lambda: admin.describe(a).profile_source == PROFILED_IN_FORCE, timeout=90,
                 what=f"a's profile measured at 2 CPUs ({admin.describe(a).state_reason})")
        time.sleep(3)  # a few rounds on the measured profile (its share may change: a new Slurm job)
        info, sj = wait_for(lambda: settled(admin, slurm, d, a), timeout=60, what="a's share in Slurm")
        (place,) = info.placements
        # Slurm holds what the round decided: the node, whole CPUs, memory, one GPU.
        assert place.node_id == n0 and sj["nodes"] == n0 and sj["cpus"] == int(place.cpus) == 2
        assert sj["tres_per_node"] == "gres:gpu:1"
        pid = wait_for(lambda: task_pid(sj, a, info.attempt), what="a's process")
        assert memory_limit_mb(pid) == int(place.mem_gb * 1024)  # Slurm's cgroup, seen from the process
        assert aff.read_text().splitlines()[0].split()[1] == "2"  # the process runs on both cores

        # A second job: tune halves a's CPUs. Slurm cannot resize a running job, so a checkpoints
        # and exits 75 and runs on in a new Slurm job holding one CPU.
        before = info.attempt
        b = admin.submit("b", gpus=1, model="resnet18", command=SLEEPER, working_dir=str(tmp_path)).id
        # (under load a may first be relaunched at 2 CPUs, e.g. on a profile measured again:
        # wait for the attempt that holds the new share)
        info, sj2 = wait_for(lambda: (s := settled(admin, slurm, d, a)) and s[0].attempt > before
                             and [p.cpus for p in s[0].placements] == [1.0] and s,
                             timeout=90, what=f"a relaunched with its new share ({admin.describe(a).state_reason})")
        wait_for(lambda: admin.state(b) == "running", timeout=30, what="b to run")
        assert [p.cpus for p in info.placements] == [1.0] and sj2["cpus"] == 1
        assert any("resized to" in t.reason and "a new Slurm job" in t.reason for t in info.history), info.history
        assert memory_limit_mb(wait_for(lambda: task_pid(sj2, a, info.attempt), what="a's new process")) == (
            sj2["memory_per_node"])
        finished(admin, a)
        assert admin.describe(a).profile_source == PROFILED_IN_FORCE
        first = slurm_jobs_of(slurm, d, a)[0]
        assert first["job_state"] == "FAILED" and first["exit_code"] >> 8 == 75  # checkpointed, restart me
        rows = records(rec)
        assert {r.attempt for r in rows} >= {1, 2}
        assert_exactly_once(rows, samples=128, epochs=2)
        cores = {int(line.split()[1]) for line in aff.read_text().splitlines()}
        assert cores == {2, 1}  # seen from inside: both cores, then the one Slurm bound the last attempt to
    finally:
        admin.close()
        d.terminate()
    # The profile a was scheduled with at the end: both points measured under Slurm, 2 CPUs by its
    # first Slurm job (carried over in the checkpoint) and 1 CPU by its last, not the stand-in.
    store = open_store(d.state_dir)
    try:
        doc = store.job(a).reported_profile
    finally:
        store.close()
    assert doc is not None and doc["source"].startswith("profiled: 2 points at 1.0, 2.0 CPUs for 1 GPU(s)"), doc
    assert doc["cpus_per_gpu"] == [1.0, 2.0] and doc["task"] == "image"


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
