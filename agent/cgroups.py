"""cgroups: one parent the agent owns, one child per task with its cpuset, memory and CPU limits.

Detected once at start (`detect`), in this order: cgroup v1 with the `cpuset`, `memory` and
`cpu` controllers mounted and writable; cgroup v2 whose root offers those controllers;
otherwise `NoCgroups` (not root, read-only, controllers missing): tasks are then confined by
CPU affinity only and the agent says "memory not enforced".

Layout: `<controller root>/<parent>/<task>` with `parent` = `synergy/<node-id>` by default,
so several agents on one machine (disjoint `--cpus` slices) never touch each other's groups.
The agent writes only into directories it created itself, plus (v2) the `+controller`
entries of the ancestors' `cgroup.subtree_control` that delegation needs.

A task joins its groups *before* it execs (the launcher writes its pid into `join_files()`
in the child), so no instant of the job runs outside its limits. v1 cpusets need both
`cpuset.mems` and `cpuset.cpus` written before any task may join.
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from synergy.agent.cores import format_cpu_list

CONTROLLERS = ("cpuset", "memory", "cpu")
#: Used where offered (v1: mounted; v2: in cgroup.controllers): each task's `pids.max`.
OPTIONAL_CONTROLLERS = ("pids",)
#: memory.high as a fraction of memory.max (v2): reclaim pressure first, the OOM killer at the limit.
MEMORY_HIGH_FRACTION = 0.95


class CgroupError(RuntimeError):
    """A cgroup file or directory could not be written (the message names the path)."""


@dataclass(frozen=True)
class CgroupStats:
    """Cumulative counters of one task group (None: this cgroup version does not keep it)."""

    cpu_usage_s: float | None = None
    memory_bytes: int | None = None
    page_faults: int | None = None
    major_faults: int | None = None
    read_bytes: int | None = None
    write_bytes: int | None = None
    #: resource ("cpu", "memory", "io") -> the text of its PSI file (v2 only)
    pressure: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Limits:
    """What one task may use: exclusive cores, NUMA nodes, memory and a CPU-time quota."""

    cores: tuple[int, ...]
    mem_bytes: int = 0  # 0 = no memory limit
    cpu_quota: float = 0.0  # CPUs of CPU time per period; 0 = no quota
    pids_max: int = 0  # processes and threads; 0 = no limit (or no pids controller)
    #: CPUs the group's CFS weight stands for (v1 cpu.shares 1024, v2 cpu.weight 100 per CPU; None:
    #: leave the weight alone). Weights proportional to the allocations give every contending task at
    #: least its allocation on the cores it shares, whatever a task without a quota (start-up) asks.
    cpu_weight: float | None = None


def _write(path: Path, value: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _rmdir(d: Path) -> bool:
    """Remove one group; False while a process is still leaving it (EBUSY)."""
    try:
        d.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return False
        if exc.errno == errno.ENOTEMPTY and not any(p.is_dir() for p in d.iterdir()):
            # Only a plain directory (a fake tree in tests) refuses rmdir for its files;
            # cgroupfs removes its control files with the group.
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
        else:
            raise CgroupError(f"cannot remove {d}: {exc.strerror}") from None
    return True


def _counters(text: str, keys: tuple[str, ...]) -> dict[str, int]:
    """Several "name value" lines of a stat file in one pass (absent ones: 0)."""
    out = dict.fromkeys(keys, 0)
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in out and value.strip().isdigit():
            out[name] = int(value)
    return out


def _counter(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


class Cgroups:
    """No cgroups: the fallback (affinity only). The real drivers below override each step."""

    kind = "none"
    enforces_memory = False

    def __init__(self, reason: str = "") -> None:
        self.reason = reason

    def describe(self) -> str:
        return f"no cgroups ({self.reason}): CPU affinity only, memory not enforced"

    #: the task groups get a `pids.max` (the pids controller is there)
    limits_pids = False

    def setup(self, cores: Iterable[int]) -> None:
        """Create the agent's parent group and let it use the agent's cores.

        Only ever *widens* the node group's cpuset (a v1 parent cannot drop cores a child
        still holds: EBUSY): a restarted agent whose `--cpus` changed first moves the tasks
        it re-adopted into the new slice, then narrows the group with `confine`.
        """

    def confine(self, cores: Iterable[int]) -> None:
        """Narrow the node group's cpuset to exactly the agent's cores (after `setup`)."""

    def create(self, name: str, limits: Limits) -> None:
        """Create the task's group with its limits (before the task starts)."""

    def apply(self, name: str, limits: Limits) -> None:
        """Change a live task's limits in place (RESIZE)."""

    def join_files(self, name: str) -> list[str]:
        """Files the task's process writes its pid into to join its groups."""
        return []

    def oom_kills(self, name: str) -> int:
        """How many processes of the group the kernel killed for its memory limit."""
        return 0

    def pids(self, name: str) -> list[int]:
        return []

    def members(self, name: str) -> list[int]:
        """The group's processes from one hierarchy (telemetry's cheap listing; `pids` reads all)."""
        return []

    def stats(self, name: str) -> CgroupStats:
        """The group's own counters (telemetry prefers them to summing /proc over its processes)."""
        return CgroupStats()

    def exists(self, name: str) -> bool:
        return False

    def children(self) -> list[str]:
        """Names of the task groups under the agent's parent (a restart finds its old ones)."""
        return []

    def remove(self, name: str) -> bool:
        """Kill what is left in the group and remove it; False when it is still busy."""
        return True

    def teardown(self) -> None:
        """Remove the parent group when it is empty."""


class _TreeCgroups(Cgroups):
    """Shared by v1 and v2: directories per controller root, created and removed by us."""

    #: controller -> root directory of its hierarchy (v2: the same root for all three).
    roots: dict[str, Path]

    def __init__(self, roots: dict[str, Path], parent: str) -> None:
        super().__init__()
        self.roots = roots
        self.parent = parent.strip("/")
        self.created: list[Path] = []

    def _dirs(self, name: str = "") -> list[Path]:
        seen: dict[Path, None] = {}
        for root in self.roots.values():
            seen[root / self.parent / name if name else root / self.parent] = None
        return list(seen)

    def _dir(self, controller: str, name: str = "") -> Path:
        base = self.roots[controller] / self.parent
        return base / name if name else base

    def _mkdir(self, path: Path) -> bool:
        try:
            path.mkdir()
        except FileExistsError:
            return False
        except OSError as exc:
            raise CgroupError(f"cannot create {path}: {exc.strerror}") from None
        return True

    def _make_parents(self) -> list[Path]:
        """mkdir -p of the parent under every root; the directories this call created."""
        made: list[Path] = []
        for root in dict.fromkeys(self.roots.values()):
            path = root
            for part in Path(self.parent).parts:
                path = path / part
                if self._mkdir(path):
                    made.append(path)
        self.created.extend(made)
        return made

    def exists(self, name: str) -> bool:
        return all(d.is_dir() for d in self._dirs(name))

    def children(self) -> list[str]:
        names: set[str] = set()
        for d in self._dirs():
            try:
                names.update(p.name for p in d.iterdir() if p.is_dir())
            except OSError:
                continue
        return sorted(names)

    def join_files(self, name: str) -> list[str]:
        return [str(d / "cgroup.procs") for d in self._dirs(name)]

    def members(self, name: str) -> list[int]:
        try:
            fd = os.open(self._dir("memory", name) / "cgroup.procs", os.O_RDONLY)
        except OSError:
            return []
        try:
            return [int(p) for p in os.read(fd, 1 << 20).split()]
        finally:
            os.close(fd)

    def pids(self, name: str) -> list[int]:
        out: set[int] = set()
        for d in self._dirs(name):
            out.update(int(p) for p in _read(d / "cgroup.procs").split() if p.isdigit())
        return sorted(out)

    def remove(self, name: str) -> bool:
        for pid in self.pids(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        done = True
        for d in self._dirs(name):
            if not _rmdir(d):
                done = False
        return done

    def teardown(self) -> None:
        for path in reversed(self.created):
            try:
                _rmdir(path)
            except CgroupError:
                pass  # still in use (another agent, a task we could not remove): leave it
        self.created.clear()
        # A previous instance of this agent (killed, or leaving its tasks running) may have
        # created the parent: remove what of it is now empty. rmdir of a cgroup that still
        # has groups or processes fails, so another agent's groups are never touched.
        for root in dict.fromkeys(self.roots.values()):
            parts = Path(self.parent).parts
            for depth in range(len(parts), 0, -1):
                try:
                    os.rmdir(root.joinpath(*parts[:depth]))
                except OSError:
                    break


#: cgroup v1 cpu.shares of one process (the kernel's default): the agent's groups get this per core
CPU_SHARES_PER_CORE = 1024
#: the kernel's bounds and defaults: v1 cpu.shares >= 2; v2 cpu.weight in [1, 10000], 100 per process
V1_MIN_SHARES = 2
V2_WEIGHT_PER_CPU = 100
V2_MAX_WEIGHT = 10_000


class CgroupsV1(_TreeCgroups):
    kind = "v1"
    enforces_memory = True

    def __init__(self, roots: dict[str, Path], parent: str) -> None:
        super().__init__(roots, parent)
        self.limits_pids = "pids" in roots

    def describe(self) -> str:
        where = ", ".join(f"{c}={self._dir(c)}" for c in CONTROLLERS)
        return f"cgroup v1 ({where})"

    def setup(self, cores: Iterable[int]) -> None:
        cores = tuple(cores)
        made = self._make_parents()
        cpuset_root = self.roots["cpuset"]
        mems = _read(cpuset_root / "cpuset.mems").strip() or "0"
        for path in made:  # a new v1 cpuset is empty: fill it from its parent before use
            if path.is_relative_to(cpuset_root):
                _write(path / "cpuset.mems", _read(path.parent / "cpuset.mems").strip() or mems)
                _write(path / "cpuset.cpus", _read(path.parent / "cpuset.cpus").strip())
        node = self._dir("cpuset")
        _write(node / "cpuset.mems", mems)
        have = _parse_cpus(_read(node / "cpuset.cpus"))
        _write(node / "cpuset.cpus", format_cpu_list(sorted(have | set(cores))))
        self.mems = mems
        # The slice weighs against processes outside it as the tasks it runs would as processes:
        # a group's cpu.shares is its weight on all its cores together (split by their load), so
        # with the default 1024 a task on core 0 lost weight to outside processes on core 0 whenever
        # a sibling ran on core 1 (a throttled contender included: the training job it was held for
        # got less CPU, not more). Only ever raised: a parent may hold other agents' slices too.
        weight = CPU_SHARES_PER_CORE * max(1, len(cores))
        path = self.roots["cpu"]
        for part in Path(self.parent).parts:
            path = path / part
            if int(_read(path / "cpu.shares").strip() or 0) < weight:
                _write(path / "cpu.shares", str(weight))

    def confine(self, cores: Iterable[int]) -> None:
        _write(self._dir("cpuset") / "cpuset.cpus", format_cpu_list(tuple(cores)))

    def create(self, name: str, limits: Limits) -> None:
        for d in self._dirs(name):
            self._mkdir(d)
        _write(self._dir("cpuset", name) / "cpuset.mems", self.mems)
        self.apply(name, limits)

    def apply(self, name: str, limits: Limits) -> None:
        _write(self._dir("cpuset", name) / "cpuset.cpus", format_cpu_list(limits.cores))
        mem = self._dir("memory", name)
        _write(mem / "memory.limit_in_bytes", str(limits.mem_bytes) if limits.mem_bytes else "-1")
        cpu = self._dir("cpu", name)
        period = int(_read(cpu / "cpu.cfs_period_us").strip() or 100_000)
        quota = int(limits.cpu_quota * period) if limits.cpu_quota > 0 else -1
        _write(cpu / "cpu.cfs_quota_us", str(max(quota, 1000) if quota > 0 else -1))
        if limits.cpu_weight is not None:
            _write(cpu / "cpu.shares", str(max(V1_MIN_SHARES, round(limits.cpu_weight * CPU_SHARES_PER_CORE))))
        if "pids" in self.roots:
            _write(self._dir("pids", name) / "pids.max", str(limits.pids_max) if limits.pids_max else "max")

    def oom_kills(self, name: str) -> int:
        return _counter(_read(self._dir("memory", name) / "memory.oom_control"), "oom_kill")

    def stats(self, name: str) -> CgroupStats:
        stat = _read(self._dir("memory", name) / "memory.stat")
        if not stat:
            return CgroupStats()
        kv = _counters(stat, ("total_pgfault", "total_pgmajfault", "total_rss", "total_cache"))
        return CgroupStats(
            memory_bytes=kv["total_rss"] + kv["total_cache"],
            page_faults=kv["total_pgfault"],
            major_faults=kv["total_pgmajfault"],
        )


class CgroupsV2(_TreeCgroups):
    kind = "v2"
    enforces_memory = True

    def __init__(self, root: Path, parent: str, pids: bool = False) -> None:
        super().__init__({c: Path(root) for c in CONTROLLERS}, parent)
        self.root = Path(root)
        self.controllers = CONTROLLERS + (("pids",) if pids else ())
        self.limits_pids = pids

    def describe(self) -> str:
        return f"cgroup v2 ({self.root / self.parent})"

    def _delegate(self, path: Path) -> None:
        """Enable our controllers for `path`'s children (only the ones missing)."""
        have = set(_read(path / "cgroup.subtree_control").split())
        missing = [c for c in self.controllers if c not in have]
        if missing:
            _write(path / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))

    def setup(self, cores: Iterable[int]) -> None:
        self._make_parents()
        path = self.root
        self._delegate(path)
        for part in Path(self.parent).parts:
            path = path / part
            self._delegate(path)
        _write(path / "cpuset.cpus", format_cpu_list(cores))  # v2 never refuses a parent's narrowing

    def confine(self, cores: Iterable[int]) -> None:
        _write(self._dir("cpuset") / "cpuset.cpus", format_cpu_list(tuple(cores)))

    def create(self, name: str, limits: Limits) -> None:
        self._mkdir(self._dir("cpuset", name))
        self.apply(name, limits)

    def apply(self, name: str, limits: Limits) -> None:
        d = self._dir("cpuset", name)
        _write(d / "cpuset.cpus", format_cpu_list(limits.cores))
        if limits.mem_bytes:
            _write(d / "memory.high", str(int(limits.mem_bytes * MEMORY_HIGH_FRACTION)))
            _write(d / "memory.max", str(limits.mem_bytes))
        else:
            _write(d / "memory.high", "max")
            _write(d / "memory.max", "max")
        period = 100_000
        quota = max(int(limits.cpu_quota * period), 1000) if limits.cpu_quota > 0 else 0
        _write(d / "cpu.max", f"{quota if quota else 'max'} {period}")
        if limits.cpu_weight is not None:
            _write(d / "cpu.weight", str(min(V2_MAX_WEIGHT, max(1, round(limits.cpu_weight * V2_WEIGHT_PER_CPU)))))
        if self.limits_pids:
            _write(d / "pids.max", str(limits.pids_max) if limits.pids_max else "max")

    def oom_kills(self, name: str) -> int:
        return _counter(_read(self._dir("memory", name) / "memory.events"), "oom_kill")

    def stats(self, name: str) -> CgroupStats:
        d = self._dir("cpuset", name)
        cpu = _read(d / "cpu.stat")
        mem = _read(d / "memory.current").strip()
        stat = _read(d / "memory.stat")
        io = _read(d / "io.stat")
        rbytes = wbytes = 0
        for line in io.splitlines():  # "8:0 rbytes=1 wbytes=2 rios=3 ..." per device
            for kv in line.split()[1:]:
                k, _, v = kv.partition("=")
                if k == "rbytes" and v.isdigit():
                    rbytes += int(v)
                elif k == "wbytes" and v.isdigit():
                    wbytes += int(v)
        pressure = {r: t for r in ("cpu", "memory", "io") if (t := _read(d / f"{r}.pressure"))}
        return CgroupStats(
            cpu_usage_s=_counter(cpu, "usage_usec") / 1e6 if cpu else None,
            memory_bytes=int(mem) if mem.isdigit() else None,
            page_faults=_counter(stat, "pgfault") if stat else None,
            major_faults=_counter(stat, "pgmajfault") if stat else None,
            read_bytes=rbytes if io else None,
            write_bytes=wbytes if io else None,
            pressure=pressure,
        )


def _mounts(mounts_path: str) -> list[tuple[str, str, set[str]]]:
    """(fstype, mount point, options) of every cgroup mount."""
    out = []
    for line in _read(Path(mounts_path)).splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            out.append((parts[2], parts[1], set(parts[3].split(","))))
    return out


def _parse_cpus(text: str) -> set[int]:
    """"0-2,5" -> {0, 1, 2, 5} (an empty or unreadable cpuset: none)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            out.update(range(int(lo), int(hi if hi.isdigit() else lo) + 1))
    return out


def detect(parent: str, cores: Iterable[int] = (), mounts_path: str = "/proc/mounts", enabled: bool = True,
           setup: bool = True) -> Cgroups:
    """The best driver this machine offers for `parent` (or the fallback).

    With `setup` (tools, tests) it is set up at once, falling back to the next candidate and
    finally to `Cgroups` when that fails. Without it nothing is written: the agent probes
    before it registers (it must not touch a node's groups before the daemon accepts it as
    that node's agent) and calls `setup` itself afterwards. A hierarchy this process may
    not write (not root) is no candidate: that node has no cgroups, rather than broken ones.
    """
    if not enabled:
        return Cgroups("disabled with --no-cgroups")
    cores = tuple(cores)
    mounts = _mounts(mounts_path)
    wanted = CONTROLLERS + OPTIONAL_CONTROLLERS
    v1 = {c: Path(point) for fs, point, opts in mounts if fs == "cgroup" for c in wanted if c in opts}
    reasons: list[str] = []
    candidates: list[_TreeCgroups] = []
    if all(c in v1 for c in CONTROLLERS):
        unwritable = [c for c in CONTROLLERS if not os.access(v1[c], os.W_OK)]
        if unwritable:
            reasons.append(f"cgroup v1: {', '.join(unwritable)} not writable by this user")
        else:
            candidates.append(CgroupsV1(v1, parent))
    else:
        reasons.append("cgroup v1: " + ", ".join(c for c in CONTROLLERS if c not in v1) + " not mounted")
    for fs, point, _ in mounts:
        if fs != "cgroup2":
            continue
        offered = set(_read(Path(point) / "cgroup.controllers").split())
        if not all(c in offered for c in CONTROLLERS):
            lacking = ", ".join(c for c in CONTROLLERS if c not in offered)
            reasons.append(f"cgroup v2 at {point}: no {lacking} controller")
        elif not os.access(point, os.W_OK):
            reasons.append(f"cgroup v2 at {point}: not writable by this user")
        else:
            candidates.append(CgroupsV2(Path(point), parent, pids="pids" in offered))
    if not setup:
        return candidates[0] if candidates else Cgroups("; ".join(reasons) or "no cgroup filesystem mounted")
    for driver in candidates:
        try:
            driver.setup(cores)
            return driver
        except CgroupError as exc:
            driver.teardown()
            reasons.append(f"{driver.kind}: {exc}")
    return Cgroups("; ".join(reasons) or "no cgroup filesystem mounted")
