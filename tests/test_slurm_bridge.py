"""The Slurm bridge against the daemon's real logic (in-memory store, manual clock) and a
stand-in for Slurm's commands that keeps jobs the way slurmctld does. What the end-to-end
tests in tests/slurm show against a real Slurm, here without one and exactly: nothing is
submitted twice (also after a restart), a refused sbatch requeues with Slurm's reason, a
NODE_FAIL seen before sinfo says so requeues rather than fails, and stops escalate."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from synergy.scheduler.backends.slurm.bridge import SlurmBridge, SlurmSettings
from synergy.scheduler.backends.slurm.commands import SlurmError
from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import DaemonConfig
from synergy.scheduler.daemon.context import DaemonContext
from synergy.profiler.live import ProfilingTerms, build_profile
from synergy.scheduler.daemon.profiles import MEASURING_IN_FORCE, PROFILED_IN_FORCE, ProfileBook
from synergy.scheduler.daemon.records import JobSpec, JobState
from synergy.scheduler.daemon.store import MemoryStore


@dataclass
class FakeSlurm:
    """sinfo / squeue / sbatch / scancel / sstat over an in-memory job table."""

    nodes: dict[str, str] = field(default_factory=lambda: {"n0": "idle", "n1": "idle"})
    jobs: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    refuse: str = ""

    def missing(self) -> list[str]:
        return []

    def nodes_doc(self) -> list[dict[str, Any]]:
        return [{"name": n, "hostname": n, "cpus": 4, "real_memory": 8192, "gres": "gpu:t4:2", "state": s,
                 "state_flags": [], "partitions": ["syn"], "reason": ""} for n, s in self.nodes.items()]

    def nodes_(self) -> tuple[list[dict[str, Any]], str]:
        return self.nodes_doc(), "22.05.8"

    def jobs_of(self, partition: str) -> list[dict[str, Any]]:
        return [dict(j) for j in self.jobs]

    def submit(self, flags: Sequence[str], script: str, env: Mapping[str, str]) -> int:
        if self.refuse:
            raise SlurmError(f"sbatch: error: {self.refuse}")
        f = dict(x.removeprefix("--").split("=", 1) for x in flags if "=" in x)
        job_id = len(self.jobs) + 1
        self.jobs.append({"job_id": job_id, "name": f["job-name"], "comment": f["comment"], "nodes": f["nodelist"],
                          "job_state": "RUNNING", "exit_code": 0, "state_reason": "None", "submit_time": 0})
        self.calls.append(("sbatch", f["job-name"]))
        return job_id

    def signal(self, job_id: int, signal: str) -> None:
        self.calls.append(("signal", str(job_id), signal))

    def cancel(self, job_id: int) -> None:
        self.calls.append(("cancel", str(job_id)))
        self.end(job_id, "CANCELLED", 9)

    def usage(self, slurm_ids: Sequence[int]) -> dict[int, tuple[float, int]]:
        return {}

    def partition(self, name: str) -> dict[str, str]:
        return {"OverSubscribe": "NO", "AllowGroups": "synergy", "RootOnly": "no", "AllowAccounts": "ALL",
                "AllowQos": "ALL"}

    def end(self, job_id: int, state: str, status: int = 0) -> None:
        for j in self.jobs:
            if j["job_id"] == job_id:
                j.update(job_state=state, exit_code=status)


class SlurmAdapter:
    """FakeSlurm under the names the bridge calls (`nodes`, `jobs` are taken by its tables)."""

    def __init__(self, fake: FakeSlurm) -> None:
        self.fake = fake
        self.missing, self.submit, self.signal = fake.missing, fake.submit, fake.signal
        self.cancel, self.usage, self.nodes, self.jobs = fake.cancel, fake.usage, fake.nodes_, fake.jobs_of
        self.partition = fake.partition


def build(tmp_path: Path, fake: FakeSlurm, logic: Logic | None = None) -> tuple[Logic, SlurmBridge]:
    if logic is None:
        config = DaemonConfig(state_dir=tmp_path, round_s=10, backend="slurm", slurm_partition="syn")
        logic = Logic.build(DaemonContext(config, ManualClock(), MemoryStore(), ProfileBook({}, live_profiling=False)))
    settings = SlurmSettings("syn", tmp_path / "work", "tag", "127.0.0.1:1", pending_s=30)
    bridge = SlurmBridge(logic.ctx, logic.nodes, SlurmAdapter(fake), settings)  # type: ignore[arg-type]
    bridge.check()
    return logic, bridge


def placed(tmp_path: Path, fake: FakeSlurm) -> tuple[Logic, SlurmBridge, int]:
    """Nodes registered, one job submitted, placed by a round and its LAUNCH carried out."""
    logic, bridge = build(tmp_path, fake)
    bridge.sync()  # registers the nodes
    job = logic.jobs.submit(JobSpec(name="a", command=("train",), gpus=1, profiler="none")).id
    logic.rounds.apply(logic.rounds.plan())
    bridge.sync()
    return logic, bridge, job


def test_a_placed_job_is_submitted_once_even_across_a_restart(tmp_path: Path) -> None:
    fake = FakeSlurm()
    logic, bridge, job = placed(tmp_path, fake)
    for _ in range(2):
        bridge.sync()
    assert [c for c in fake.calls if c[0] == "sbatch"] == [("sbatch", f"synergy.{job}.1.0")]
    # A new synergyd on the same store: its bridge finds the Slurm job and launches nothing.
    store = logic.ctx.store
    config = logic.ctx.config
    logic2 = Logic.build(DaemonContext(config, ManualClock(), store, ProfileBook({}, live_profiling=False)))
    logic2.recover()
    _, bridge2 = build(tmp_path, fake, logic2)
    for _ in range(3):
        bridge2.sync()
    assert len([c for c in fake.calls if c[0] == "sbatch"]) == 1
    assert logic2.jobs.get(job).state == JobState.RUNNING
    fake.end(1, "COMPLETED", 0)
    bridge2.sync()
    assert logic2.jobs.get(job).state == JobState.SUCCEEDED


def test_a_refused_sbatch_requeues_the_job_with_slurms_reason(tmp_path: Path) -> None:
    fake = FakeSlurm(refuse="Requested node configuration is not available")
    logic, bridge, job = placed(tmp_path, fake)  # sbatch refused the LAUNCH
    bridge.sync()  # reported as an impossible placement
    j = logic.jobs.get(job)
    assert j.state == JobState.QUEUED
    assert "Slurm refused the job: sbatch: error: Requested node configuration is not available" in j.history[-2].reason


def test_node_fail_before_sinfo_says_down_requeues_rather_than_fails(tmp_path: Path) -> None:
    fake = FakeSlurm()
    logic, bridge, job = placed(tmp_path, fake)
    fake.end(1, "NODE_FAIL", 0)  # squeue already says NODE_FAIL, sinfo still says idle
    bridge.sync()
    j = logic.jobs.get(job)
    assert j.state == JobState.QUEUED and "NODE_FAIL" in j.history[-2].reason
    bridge.sync()  # the node is back (sinfo says idle): the stale exit is forgotten, not applied
    assert logic.jobs.get(job).state == JobState.QUEUED


def test_a_stop_is_sigterm_then_a_cancel_after_the_grace(tmp_path: Path) -> None:
    fake = FakeSlurm()
    logic, bridge, job = placed(tmp_path, fake)
    logic.jobs.cancel(job, "test")
    bridge.sync()
    assert ("signal", "1", "TERM") in fake.calls and ("cancel", "1") not in fake.calls
    logic.ctx.clock.advance(60)  # type: ignore[attr-defined]
    bridge.sync()
    assert ("cancel", "1") in fake.calls


def test_under_slurm_an_unprofiled_job_measures_where_it_runs_and_its_reports_become_its_profile(
        tmp_path: Path) -> None:
    logic, bridge = build(tmp_path, FakeSlurm())
    bridge.sync()
    spec = JobSpec(name="a", command=("train",), gpus=1, task="image", profiler="auto",
                   checkpoint_dir=str(tmp_path / "ckpt"))
    job = logic.jobs.submit(spec)
    # No profiling lease (Slurm cannot resize a task to each point): queued with the stand-in.
    assert job.state == JobState.QUEUED and MEASURING_IN_FORCE in job.history[-1].reason
    assert logic.ctx.profiles.measures_in_force(job)
    logic.rounds.apply(logic.rounds.plan())
    bridge.sync()
    terms = ProfilingTerms("synergy", 0, "image", 1, 4.0, in_force_only=True)
    # Each Slurm job's point, reported while it runs (the second with the first, from the checkpoint).
    for points in ([(2.0, 20.0)], [(1.0, 19.0), (2.0, 20.0)]):
        doc = build_profile(points, terms, model="a", files=None, batch_size=4, process_mem_gb=0.3)
        assert logic.leases.report_profile(job.id, job.id, doc) == PROFILED_IN_FORCE
        now = logic.jobs.get(job.id)
        assert now.state == JobState.RUNNING and now.profiled and logic.ctx.profiles.measures_in_force(now)
    # A later job of the same workload takes the stored profile and measures nothing.
    again = logic.jobs.submit(JobSpec(name="b", command=("train",), gpus=1, task="image", profiler="auto",
                                      checkpoint_dir=str(tmp_path / "ckpt2")))
    assert again.profile_source.startswith(f"stored:{job.id} ") and not logic.ctx.profiles.measures_in_force(again)
    # A job with a known profile (profiler none, or a zoo model) does not measure either.
    plain = logic.jobs.submit(JobSpec(name="c", command=("other",), gpus=1, profiler="none"))
    assert not logic.ctx.profiles.measures_in_force(plain)
