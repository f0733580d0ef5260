"""The cgroup layer: v2 against a fake cgroupfs tree, v1 for real (root + v1 controllers)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Callable

import pytest

from synergy.agent.cgroups import CgroupsV1, CgroupsV2, Limits, detect

MIB = 1024**2


def _fake_v2(root: Path) -> Path:
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def test_v2_writes_limits_resizes_reads_oom_and_removes(tmp_path: Path) -> None:
    root = _fake_v2(tmp_path / "cg")
    cg = CgroupsV2(root, "synergy/n1")
    cg.setup((2, 3, 4, 5))
    assert "+cpuset" in (root / "cgroup.subtree_control").read_text()
    node = root / "synergy" / "n1"
    assert (node / "cpuset.cpus").read_text() == "2-5"
    assert "+memory" in (root / "synergy" / "cgroup.subtree_control").read_text()

    cg.create("t1", Limits(cores=(2, 3), mem_bytes=512 * MIB, cpu_quota=1.5))
    t = node / "t1"
    assert (t / "cpuset.cpus").read_text() == "2-3"
    assert (t / "memory.max").read_text() == str(512 * MIB)
    assert int((t / "memory.high").read_text()) < 512 * MIB
    assert (t / "cpu.max").read_text() == "150000 100000"
    assert cg.join_files("t1") == [str(t / "cgroup.procs")]

    cg.apply("t1", Limits(cores=(2,), mem_bytes=0, cpu_quota=0))  # resize in place
    assert (t / "cpuset.cpus").read_text() == "2"
    assert (t / "memory.max").read_text() == "max" and (t / "cpu.max").read_text() == "max 100000"

    assert cg.oom_kills("t1") == 0
    (t / "memory.events").write_text("low 0\nhigh 3\nmax 5\noom 1\noom_kill 1\n")
    assert cg.oom_kills("t1") == 1

    assert cg.remove("t1") and not t.exists()
    cg.teardown()
    assert not (root / "synergy").exists()  # only what the agent created, and nothing else
    assert (root / "cgroup.controllers").exists()


def test_v2_leaves_a_parent_it_did_not_create(tmp_path: Path) -> None:
    root = _fake_v2(tmp_path / "cg")
    (root / "synergy").mkdir()
    (root / "synergy" / "other-node").mkdir()
    cg = CgroupsV2(root, "synergy/n1")
    cg.setup((0,))
    cg.teardown()
    assert (root / "synergy" / "other-node").is_dir() and not (root / "synergy" / "n1").exists()


def test_detect_prefers_working_drivers_and_falls_back(tmp_path: Path) -> None:
    root = _fake_v2(tmp_path / "cg")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {root} cgroup2 rw,relatime 0 0\n")
    cg = detect("synergy/n1", (0,), mounts_path=str(mounts))
    assert cg.kind == "v2" and cg.enforces_memory
    cg.teardown()

    (root / "cgroup.controllers").write_text("cpu io pids\n")  # like this machine's v2 mount
    cg = detect("synergy/n1", (0,), mounts_path=str(mounts))
    assert cg.kind == "none" and not cg.enforces_memory
    assert "no cpuset, memory controller" in cg.describe() and "memory not enforced" in cg.describe()

    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "cgroup.controllers").write_text("cpuset cpu memory\n")
    (ro / "cgroup.subtree_control").write_text("")
    mounts.write_text(f"cgroup2 {ro} cgroup2 rw 0 0\n")
    ro.chmod(0o500)
    try:
        if os.geteuid() == 0:  # root ignores the mode bits: a file stands in for the directory
            mounts.write_text(f"cgroup2 {tmp_path / 'mounts'} cgroup2 rw 0 0\n")
        cg = detect("synergy/n1", (0,), mounts_path=str(mounts))
        assert cg.kind == "none"
    finally:
        ro.chmod(0o700)
    assert detect("x", (0,), enabled=False).kind == "none"


def _v1_roots() -> dict[str, Path] | None:
    roots: dict[str, Path] = {}
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[2] == "cgroup":
            for c in ("cpuset", "memory", "cpu"):
                if c in parts[3].split(","):
                    roots[c] = Path(parts[1])
    return roots if len(roots) == 3 else None


V1 = _v1_roots()
needs_v1 = pytest.mark.skipif(
    os.geteuid() != 0 or V1 is None or not all(os.access(p, os.W_OK) for p in (V1 or {}).values()),
    reason="needs root and writable cgroup v1 cpuset, memory and cpu controllers (CI runs as root)",
)


@pytest.fixture
def v1() -> CgroupsV1:
    assert V1 is not None
    cg = CgroupsV1(V1, f"synergy-test/{uuid.uuid4().hex[:8]}")
    cg.setup(sorted(os.sched_getaffinity(0)))
    yield cg
    cg.teardown()


def _enter(join_files: list[str], cores: tuple[int, ...]) -> Callable[[], None]:
    """Join the groups and pin the cores between fork and exec (what the agent's shim does)."""

    def enter() -> None:
        for f in join_files:
            with open(f, "w") as fh:
                fh.write(str(os.getpid()))
        os.sched_setaffinity(0, set(cores))

    return enter


def _child(cg: CgroupsV1, name: str, code: str, cores: tuple[int, ...]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], preexec_fn=_enter(cg.join_files(name), cores),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


@needs_v1
def test_v1_slice_weighs_like_one_process_per_core(v1: CgroupsV1) -> None:
    """Old behaviour: the default 1024 for the whole slice, so a task lost CPU weight against outside
    processes on its own core whenever a sibling task ran on another core (issue 14's throttled runs)."""
    cores = len(os.sched_getaffinity(0))
    parts = Path(v1.parent).parts
    for depth in range(1, len(parts) + 1):
        assert int((V1["cpu"].joinpath(*parts[:depth]) / "cpu.shares").read_text()) >= 1024 * cores
    assert int((v1._dir("cpu") / "cpu.shares").read_text()) == 1024 * cores
    v1.setup([0])  # a narrower slice never lowers a parent's weight (it may hold other slices)
    assert int((v1._dir("cpu") / "cpu.shares").read_text()) == 1024 * cores


@needs_v1
def test_v1_real_group_confines_cores_and_resizes_in_place(v1: CgroupsV1) -> None:
    core = min(os.sched_getaffinity(0))
    v1.create("t", Limits(cores=(core,), mem_bytes=256 * MIB, cpu_quota=0.5))
    d = v1._dir("memory", "t")
    assert int((d / "memory.limit_in_bytes").read_text()) == 256 * MIB
    assert (v1._dir("cpu", "t") / "cpu.cfs_quota_us").read_text().strip() == "50000"
    p = _child(v1, "t", "import sys; sys.stdin = None; import time; time.sleep(30)", (core,))
    try:
        status = Path(f"/proc/{p.pid}/status").read_text()
        allowed = [line for line in status.splitlines() if line.startswith("Cpus_allowed_list")][0]
        assert allowed.split()[-1] == str(core)
        assert p.pid in v1.pids("t")
        v1.apply("t", Limits(cores=(core,), mem_bytes=128 * MIB, cpu_quota=1))
        assert int((d / "memory.limit_in_bytes").read_text()) == 128 * MIB
        assert (v1._dir("cpu", "t") / "cpu.cfs_quota_us").read_text().strip() == "100000"
    finally:
        p.kill()
        p.wait()
    assert v1.remove("t") and not d.exists()


@needs_v1
def test_v1_memory_limit_oom_kills_and_is_detected(v1: CgroupsV1) -> None:
    core = min(os.sched_getaffinity(0))
    v1.create("hog", Limits(cores=(core,), mem_bytes=64 * MIB))
    p = _child(v1, "hog", "b = bytearray(400 * 1024 * 1024); print('survived')", (core,))
    out, _ = p.communicate(timeout=60)
    assert p.returncode == -9 and b"survived" not in out
    assert v1.oom_kills("hog") >= 1
    assert v1.remove("hog")


def test_v2_weight_follows_the_allocation_within_the_kernel_s_bounds(tmp_path: Path) -> None:
    """The CFS weight of a task is its allocation (the start-up phase relies on it: agent/startup.py)."""
    root = _fake_v2(tmp_path / "cg")
    cg = CgroupsV2(root, "synergy/n1")
    cg.setup((0, 1))
    t = root / "synergy" / "n1" / "t"
    for cpus, weight in ((0.25, "25"), (1.5, "150"), (0.0, "1"), (500.0, "10000")):
        cg.create("t", Limits(cores=(0,), cpu_weight=cpus))
        assert (t / "cpu.weight").read_text() == weight
    (t / "cpu.weight").write_text("77")
    cg.apply("t", Limits(cores=(0,)))  # no weight given: left alone
    assert (t / "cpu.weight").read_text() == "77"
    cg.teardown()


@needs_v1
def test_v1_shares_follow_the_allocation(v1: CgroupsV1) -> None:
    core = min(os.sched_getaffinity(0))
    for cpus, shares in ((0.25, 256), (1.5, 1536), (0.0, 2)):
        v1.create("w", Limits(cores=(core,), cpu_weight=cpus))
        assert int((v1._dir("cpu", "w") / "cpu.shares").read_text()) == shares
    assert v1.remove("w")
