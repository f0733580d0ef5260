"""Live profiling end to end: a real synergyd, a real synergy-agent (cgroup cpusets), a real
PyTorch job. A job with no known profile gets a profiling lease, measures its points at CPU
counts the agent realises by RESIZE, reports the profile ("profiled") and runs on in the same
process (no restart): the next round's allocation, from that profile, reaches it as a RESIZE.
"""

from __future__ import annotations

import json
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from agent_harness import AgentProcess, is_root_with_v1
from synergyd_harness import DaemonProcess, history, wait_for
from synergy.profiler.refine import flatten_noise

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 (CI runs as root)")

SCRIPT = str(Path(__file__).parent / "train_script.py")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "120").start()
    agent = AgentProcess(d, tmp_path / "work-n1", "n1", "--cpus", "0-1", "--memory", "2G").start()
    yield d
    agent.stop()
    d.kill()


@contextmanager
def _node(tmp_path: Path, cpus: str, fake_gpus: int) -> Iterator[tuple[DaemonProcess, object]]:
    """A daemon and one agent `n1` on `cpus` with `fake_gpus`: (the daemon, an admin client)."""
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "120").start()
    agent = AgentProcess(d, tmp_path / "work-n1", "n1", "--cpus", cpus, "--memory", "2G", fake_gpus=fake_gpus).start()
    admin = d.admin()
    try:
        yield d, admin
    finally:
        admin.close()
        agent.stop()
        d.kill()


def _succeeds(admin, job: int, timeout: float) -> None:
    wait_for(lambda: admin.state(job) in ("succeeded", "failed"), timeout=timeout,
             what=f"the job to finish (is {admin.state(job)}: {admin.describe(job).state_reason})")
    assert admin.state(job) == "succeeded", admin.describe(job).state_reason


def _submit(d: DaemonProcess, tmp_path: Path, name: str, **kw) -> int:
    admin = d.admin()
    try:
        return admin.submit(name, gpus=1, command=(
            sys.executable, "-u", SCRIPT, "--record", str(tmp_path / "batches.txt"), "--affinity",
            str(tmp_path / "affinity.txt"), "--samples", "1200", "--epochs", "1", "--step-s", "0.02"),
            working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt"), **kw).id
    finally:
        admin.close()


def test_a_job_with_no_profile_is_profiled_live_and_then_scheduled_with_it(cluster, tmp_path: Path) -> None:
    d = cluster
    admin = d.admin()
    job = _submit(d, tmp_path, "prof", profiler="auto")
    assert admin.state(job) == "profiling"
    wait_for(lambda: admin.describe(job).profile_source == "profiled", timeout=120,
             what=f"the profile to be reported (job is {admin.state(job)}: {admin.describe(job).state_reason})")
    wait_for(lambda: admin.state(job) == "succeeded", timeout=120,
             what=f"the job to finish (is {admin.state(job)}: {admin.describe(job).state_reason})")
    info = admin.describe(job)
    admin.close()
    states = history(info)
    # profiling (waiting) -> profiling (placed under the lease) -> running (profiled, no restart)
    assert states[:4] == ["submitted", "profiling", "profiling", "running"], states
    assert info.profile_source == "profiled" and info.attempt == 1, (states, info.attempt)
    assert info.history[3].reason.startswith("profiled on n1: "), info.history[3].reason
    # The points were realised by RESIZEs: the job saw its cpuset change (2 cores -> 1) and
    # its loader's worker count follow it.
    seen = {tuple(map(int, line.split()[1:])) for line in (tmp_path / "affinity.txt").read_text().splitlines()}
    assert (2, 1) in seen and (1, 0) in seen, seen
    # Profiling was real training, and training went on after it: every sample once.
    ids = sorted(int(i) for line in (tmp_path / "batches.txt").read_text().splitlines()
                 for i in line.split()[4].split(","))
    assert ids == list(range(1200))
    # ... and it was then scheduled with the profile's best-case demand.
    _assert_placed_at_the_profiled_knee(info, tmp_path / "work-n1", tmp_path / "state.log")


def _assert_placed_at_the_profiled_knee(info, work_dir: Path, daemon_log: Path) -> None:
    """The job was scheduled with its profile's best-case demand: the fewest measured CPUs
    within 1% of the best throughput once a point less than 5% faster than fewer CPUs counts
    as no gain (`flatten_noise`, as every live profile; the job's log line lists the measured
    points), as a placement in its history or a resize in place (the daemon's `job.resized`
    events)."""
    done = next(line for f in work_dir.rglob("*.log") for line in f.read_text().splitlines()
                if "profiling done:" in line)
    points = flatten_noise([(int(p.split()[0]), float(p.split()[2])) for p in done.split("profiling done: ")[1].split(", ")])
    best = max(s for _, s in points)
    knee = min(c for c, s in points if s >= 0.99 * best)
    placed = [t.reason for t in info.history if "placed on" in t.reason or t.reason.startswith("profiled on")]
    events = [json.loads(line) for line in daemon_log.read_text().splitlines() if line.startswith("{")]
    placed += [e["placements"] for e in events if e.get("event") == "job.resized" and e.get("job") == info.id]
    assert any(f"n1: 1 GPU, {knee} CPU" in r for r in placed), (points, placed)


@pytest.mark.slow
def test_the_image_example_is_profiled_live_then_scheduled_and_succeeds(cluster, tmp_path: Path) -> None:
    """The real examples/image_classification/train.py, not a test script: tiny (128 JPEGs of
    32 px, batch 16: 8 steps an epoch), no model named, a checkpoint dir, read through its MinIO
    cache. Profiling takes two points (windows of at least 11 iterations and 1 s: an epoch
    takes well under a second here), and training runs on in the same process after it
    (160 epochs, 1280 steps)."""
    admin = cluster.admin()
    job = admin.submit("image", gpus=1, command=(
        sys.executable, "-u", str(EXAMPLES / "image_classification" / "train.py"), "--images", "128",
        "--image-size", "32", "--batch-size", "16", "--epochs", "160", "--data-dir", str(tmp_path / "data")),
        working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt"), profiler="auto").id
    assert admin.state(job) == "profiling"
    wait_for(lambda: admin.describe(job).profile_source == "profiled", timeout=180,
             what=f"the profile to be reported (job is {admin.state(job)}: {admin.describe(job).state_reason})")
    wait_for(lambda: admin.state(job) in ("succeeded", "failed"), timeout=180,
             what=f"the job to finish (is {admin.state(job)}: {admin.describe(job).state_reason})")
    info = admin.describe(job)
    admin.close()
    logs = "\n".join(f.read_text() for f in (tmp_path / "work-n1").rglob("*.log"))
    assert history(info)[:4] == ["submitted", "profiling", "profiling", "running"], (history(info), logs[-3000:])
    assert history(info)[-1] == "succeeded", (history(info), logs[-3000:])
    assert "Traceback" not in logs, logs[-3000:]
    # Profiled, it ran on in the same process (no resume) and trained to the end.
    assert info.attempt == 1 and not re.findall(r"resuming from", logs), logs[-3000:]
    assert info.history[-1].reason == "training finished at step 1280", history(info)
    assert "epoch 159 step 1280 " in logs, logs[-3000:]
    _assert_placed_at_the_profiled_knee(info, tmp_path / "work-n1", tmp_path / "state.log")

def test_profiler_none_keeps_the_stand_in(cluster, tmp_path: Path) -> None:
    admin = cluster.admin()
    job = _submit(cluster, tmp_path, "noprof", profiler="none", task="image")
    info = admin.describe(job)
    assert info.profile_source.startswith("zoo:resnet18") and history(info)[:3] == ["submitted", "profiling", "queued"]
    wait_for(lambda: admin.state(job) == "running", timeout=60, what="the job to run")
    assert admin.describe(job).attempt == 1
    admin.close()


def test_a_bad_profiler_value_is_invalid_argument_naming_the_field(cluster, tmp_path: Path) -> None:
    admin = cluster.admin()
    with pytest.raises(grpc.RpcError) as err:
        _submit(cluster, tmp_path, "bad", profiler="fast")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("spec.profiler: must be one of auto, synergy, coda, none")
    assert not admin.jobs()
    admin.close()


def test_a_coda_job_uses_at_most_four_probes(cluster, tmp_path: Path) -> None:
    admin = cluster.admin()
    job = _submit(cluster, tmp_path, "coda", profiler="coda", task="image")
    wait_for(lambda: admin.describe(job).profile_source == "profiled", timeout=120, what="the coda profile")
    admin.close()
    done = next(line for f in (tmp_path / "work-n1").rglob("*.log") for line in f.read_text().splitlines()
                if "profiling done:" in line)
    assert 1 <= len(done.split("profiling done: ")[1].split(", ")) <= 4


def test_cache_stats_reach_describe(cluster, tmp_path: Path) -> None:
    admin = cluster.admin()
    # the test job reading its samples from files through the job's MinIO cache
    job = admin.submit("cached2", gpus=1, command=(
        sys.executable, "-u", SCRIPT, "--record", str(tmp_path / "c.txt"), "--samples", "600", "--epochs", "2",
        "--step-s", "0.02", "--cache-dir", str(tmp_path / "files")), profiler="none", task="image",
        working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt2")).id
    wait_for(lambda: admin.describe(job).cache.misses > 0, timeout=90, what="cache stats in describe")
    wait_for(lambda: admin.describe(job).cache.hits > 0, timeout=90, what="cache hits in the second epoch")
    c = admin.describe(job).cache
    assert c.capacity_bytes > 0 and c.used_bytes <= c.capacity_bytes and c.items > 0
    admin.close()


def test_a_light_job_is_profiled_below_one_cpu_where_the_share_is_half_a_core(tmp_path: Path) -> None:
    """Issue 14: two fake GPUs on one core (half a CPU per GPU). The lease says `sub_core`
    and holds half a core (never a whole one: that is two GPUs' share), the job measures half
    a core and a quarter (CFS quota, realised by RESIZE), and its profile's rows start below
    one CPU."""
    with _node(tmp_path, "0", fake_gpus=2) as (d, admin):
        job = _submit(d, tmp_path, "light", profiler="synergy")
        wait_for(lambda: admin.describe(job).profile_source == "profiled", timeout=120,
                 what=f"the profile to be reported (job is {admin.state(job)}: {admin.describe(job).state_reason})")
        done = wait_for(lambda: next((line for f in (tmp_path / "work-n1").rglob("*.log")
                                      for line in f.read_text().splitlines() if "profiling done:" in line), None),
                        timeout=30, what="the job's profiling summary")
        cpus = [float(p.split()[0]) for p in done.split("profiling done: ")[1].split(", ")]
        assert cpus == [0.25, 0.5], done
        _succeeds(admin, job, timeout=120)


def test_the_guess_above_the_lease_stops_at_the_device_time_of_a_step(tmp_path: Path) -> None:
    """Issue 14: a loading-heavy job still climbing at the top of its half-core lease gets an
    optimistic row above it (profiler/refine.py), but no CPU count makes a step shorter than
    its device time: with 60 ms of device time a step, 4 samples a step, no guess may promise
    more than 66.7 samples/s. On the line through the lease's points alone, it promised about
    100. (Alone on its node, the job is then refined at the CPUs the round gives it.)"""
    step_s, batch = 0.06, 4
    with _node(tmp_path, "0-1", fake_gpus=4) as (_, admin):
        job = admin.submit("heavy", gpus=1, command=(
            sys.executable, "-u", str(EXAMPLES.parent / "benchmarks" / "physical_job.py"), "--samples", "800",
            "--cpu-ms", "10", "--step-s", str(step_s), "--batch-size", str(batch), "--workers", "2"),
            working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt"), profiler="synergy").id
        _succeeds(admin, job, timeout=180)
    log = "\n".join(f.read_text() for f in (tmp_path / "work-n1").rglob("*.log"))
    guesses = [float(g) for g in re.findall(r"above the measured points: \S+ CPUs guessed at ([0-9.]+) samples/s", log)]
    assert guesses, log  # it was still climbing at the top of its lease: a guess was made
    assert max(guesses) <= 1.15 * batch / step_s, (guesses, log)
