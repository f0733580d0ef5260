"""The image example's MinIO cache under a real cluster (issue 14: "the image example's cache
never reports"). The real examples/image_classification/train.py, which wraps its
`CachedFileDataset` in a labelled dataset, on a real synergyd and a real synergy-agent (cgroups,
fake GPUs), on a small image set made by the test:

* describe shows the cache's statistics (they were null: the wrap looked only at
  `loader.dataset.cache`);
* the live profile's memory axis is modelled over the job's own files (their size, their
  measured read bandwidth), not the "memory-insensitive" stand-in;
* the RESIZE to less memory after profiling shrinks the cache to what the new allocation affords;
* a cancelled (SIGTERM) or killed (SIGKILL) job leaves no /dev/shm segment: the agent removes it
  when it reaps the job.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Iterator

import pytest

from cli_runner import run_cli
from agent_harness import AgentProcess, alive, is_root_with_v1
from synergyd_harness import DaemonProcess, history, wait_for
from synergy.cache import segment
from synergy.cache.sizing import capacity_from_allocation
from synergy.v1 import admin_pb2

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 (CI runs as root)")]

TRAIN = str(Path(__file__).resolve().parents[2] / "examples" / "image_classification" / "train.py")
#: The example's default --process-mem-gb (its memory that is not cache).
PROCESS_MEM_GB = 0.25


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[DaemonProcess, AgentProcess]]:
    """synergyd and one agent: two cores, two fake GPUs, 2 GB."""
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "120").start()
    agent = AgentProcess(d, tmp_path / "work", "n1", "--cpus", "0-1", "--memory", "2G", fake_gpus=2).start()
    yield d, agent
    agent.stop()
    agent.remove_cgroups()
    d.kill()


def submit(d: DaemonProcess, tmp_path: Path, name: str, epochs: int, **kw) -> int:
    admin = d.admin()
    try:
        return admin.submit(name, gpus=1, command=(
            sys.executable, "-u", TRAIN, "--images", "128", "--image-size", "32", "--batch-size", "16",
            "--epochs", str(epochs), "--data-dir", str(tmp_path / "data")),
            working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / f"ckpt-{name}"), **kw).id
    finally:
        admin.close()


def segments(job: int) -> list[Path]:
    """The job's cache segments in /dev/shm (any attempt)."""
    return sorted(Path(segment.SHM_DIR).glob(f"{segment.PREFIX}j{job}-a*"))


def test_describe_shows_the_cache_the_profile_models_its_files_and_a_resize_shrinks_it(
        node, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d, agent = node
    admin = d.admin()
    # 160 epochs of 8 steps: long enough for the live search's 1 s windows (40 epochs ended
    # within the profiling lease on a busy CI machine, before any profile was reported).
    job = submit(d, tmp_path, "img", epochs=160, profiler="auto")

    def profiled() -> bool:
        info = admin.describe(job)
        assert admin.state(job) not in ("succeeded", "failed", "cancelled"), \
            f"job ended before its profile was reported: {history(info)}"
        return info.profile_source == "profiled"

    wait_for(profiled, timeout=180, what="the profile")
    wait_for(lambda: admin.describe(job).cache.hits > 0, timeout=60,
             what=f"cache hits in describe (cache: {admin.describe(job).cache})")
    wait_for(lambda: "cache resized for" in agent.task_log(job), timeout=60,
             what="the RESIZE after profiling to reach the cache")
    wait_for(lambda: admin.state(job) in ("succeeded", "failed"), timeout=180,
             what=f"the job to finish (is {admin.state(job)}: {admin.describe(job).state_reason})")
    info = admin.describe(job)
    admin.close()
    log = agent.task_log(job)
    # The filed symptom: `synergy describe img --json` showed "cache": null.
    described = run_cli(capsys, "--state-dir", str(d.state_dir), "--json", "describe", "img")
    assert described.code == 0, described.err
    assert json.loads(described.out)["cache"]["misses"] == info.cache.misses == 128, described.out
    assert history(info)[-1] == "succeeded", (history(info), log[-3000:])
    assert "MinIO cache /dev/shm/synergy-cache-j" in log and "found at loader.dataset.images.cache" in log, log[-3000:]

    # describe: the job's statistics (128 images, 160 epochs: every image missed once, then hits;
    # the last renewal may come before the last epochs, and profiling's worker switches re-read
    # what the old workers had prefetched).
    c = info.cache
    assert c.misses == 128 and c.items == 128 and c.hits >= 120 * 128, c
    files = sorted((tmp_path / "data").rglob("*.jpg"))
    assert c.used_bytes == sum(f.stat().st_size for f in files) <= c.capacity_bytes, c

    # The profile's memory axis is the MinIO model over these files, read at a measured
    # bandwidth (a job without a cache gets a nominal dataset read at 1e+09 MB/s).
    source = re.search(r"profile reported \((.*)\)", log)
    assert source is not None, log[-3000:]
    dataset_gb = float(re.search(r"dataset ([\d.e+-]+) GB", source.group(1)).group(1))
    storage = float(re.search(r"storage ([\d.e+-]+) MB/s", source.group(1)).group(1))
    assert dataset_gb == float(f"{sum(f.stat().st_size for f in files) / 1e9:.4g}"), source.group(1)
    assert storage < 1e9, source.group(1)

    # Launched with the profiling lease's 2 GB, then RESIZEd to its share: the cache shrank to
    # what the share affords, and describe reports that capacity.
    resized = re.search(r"cache resized for ([\d.]+) GB of memory \(was 2 GB\): capacity (\d+) bytes", log)
    assert resized is not None, log[-3000:]
    mem_gb, capacity = float(resized.group(1)), int(resized.group(2))
    # (the log prints the GB to 6 digits: the capacity is the model's for that memory within them)
    assert mem_gb < 2 and abs(capacity - capacity_from_allocation(mem_gb, process_mem_gb=PROCESS_MEM_GB)) <= 1e-5 * capacity, \
        resized
    assert capacity < capacity_from_allocation(2.0, process_mem_gb=PROCESS_MEM_GB)
    # Later rounds may resize it again (a refined profile, more memory once a neighbour ends):
    # describe reports the capacity of the last resize, each one the model's for its memory.
    every = re.findall(r"cache resized for ([\d.]+) GB of memory \(was [\d.]+ GB\): capacity (\d+) bytes", log)
    assert all(abs(int(cap) - capacity_from_allocation(float(gb), process_mem_gb=PROCESS_MEM_GB)) <= 1e-5 * int(cap)
               for gb, cap in every), every  # (the log prints the GB to 6 digits)
    assert c.capacity_bytes == int(every[-1][1]), (c, every)
    assert not segments(job)  # a job that ended normally removed its own


def test_a_cancelled_or_killed_cached_job_leaves_no_shm_segment(node, tmp_path: Path) -> None:
    d, agent = node
    admin = d.admin()
    cancelled = submit(d, tmp_path, "cancelled", epochs=1000)
    killed = submit(d, tmp_path, "killed", epochs=1000)
    for job in (cancelled, killed):
        wait_for(lambda: admin.describe(job).cache.hits > 0, timeout=120,
                 what=f"job {job} to read through its cache (is {admin.state(job)})")
        assert len(segments(job)) == 1

    # A cancel: the agent SIGTERMs the job, which dies of it (no atexit, no clean-up of its own).
    admin.CancelJob(admin_pb2.CancelJobRequest(job=str(cancelled), reason="test"))
    wait_for(lambda: admin.state(cancelled) == "cancelled", timeout=60, what="the cancel")
    wait_for(lambda: not segments(cancelled), timeout=30, what=f"{segments(cancelled)} to be removed")

    # SIGKILL to the job's main process (the segment's owner): the agent reaps it and removes it.
    (path,) = segments(killed)
    owner = segment.Header.read(path.read_bytes()[:segment.HEADER.size]).owner_pid
    assert alive(owner)
    os.kill(owner, signal.SIGKILL)
    wait_for(lambda: not path.exists(), timeout=30, what=f"{path} to be removed after the SIGKILL")
    admin.close()
    assert str(path) in agent.log_text() and "cache.segments_removed" in agent.log_text()
