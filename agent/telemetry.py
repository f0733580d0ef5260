"""Per-task and per-node telemetry, sampled every second by default at low cost.

What one sample holds (dataclasses, ready to go into heartbeats once the proto has the
fields, and on the agent's `/metrics` now):

* per task: CPU use (cores' worth of CPU time per second), RSS and the group's memory,
  page faults (minor and major) and I/O bytes per second, PSI pressure (cgroup v2), its
  GPUs' utilisation and memory, and memory bandwidth with its source;
* per node (the agent's slice): CPU use, memory, PSI (`/proc/pressure/*`), GPUs, memory
  bandwidth and the calibrated peak, each with its source.

Sources, cheapest and most complete first: the task's cgroup counters (they include
processes that already exited), else the sum over the task's processes from `/proc`
(`stat`, `io`): the processes of its cgroup (`cgroup.procs`), or without cgroups the
job's process tree. Rates are deltas between two samples; the first sample of a task
reports 0. Reading a handful of small files per task keeps a sample within a few
milliseconds for dozens of tasks (benchmarks/agent_overhead.py measures it).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import psutil

from synergy.agent.bandwidth import SOURCE_ESTIMATE, SOURCE_MBM, SOURCE_NONE, Bandwidth, Calibration, Resctrl
from synergy.agent.cgroups import Cgroups
from synergy.agent.gpus import GpuSample, Gpus
from synergy.agent.tasks import Task

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
PRESSURE_RESOURCES = ("cpu", "memory", "io")


@dataclass(frozen=True)
class Pressure:
    """PSI of one resource: share of the last 10 s in which some / all tasks stalled (%)."""

    some_avg10: float = 0.0
    full_avg10: float = 0.0


def parse_pressure(text: str) -> Pressure | None:
    """The kernel's PSI text ("some avg10=1.50 avg60=... total=...\\nfull ...") -> Pressure."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        kind, *pairs = line.split()
        for pair in pairs:
            k, _, v = pair.partition("=")
            if k == "avg10":
                try:
                    values[kind] = float(v)
                except ValueError:
                    pass
    if "some" not in values:
        return None
    return Pressure(values["some"], values.get("full", 0.0))


@dataclass(frozen=True)
class ProcCounters:
    """Cumulative counters summed over some processes (from /proc/PID/stat and /proc/PID/io)."""

    cpu_s: float = 0.0
    minflt: int = 0
    majflt: int = 0
    rss_bytes: int = 0
    read_bytes: int = 0
    write_bytes: int = 0

    def __add__(self, o: ProcCounters) -> ProcCounters:
        return ProcCounters(self.cpu_s + o.cpu_s, self.minflt + o.minflt, self.majflt + o.majflt,
                            self.rss_bytes + o.rss_bytes, self.read_bytes + o.read_bytes,
                            self.write_bytes + o.write_bytes)


def parse_proc_stat(text: str) -> ProcCounters:
    """/proc/PID/stat -> CPU seconds (user + system), faults, RSS (the comm field may hold spaces)."""
    f = text[text.rindex(")") + 2 :].split()
    # fields after comm, 0-based: state=0, minflt=7, majflt=9, utime=11, stime=12, rss=21
    return ProcCounters(cpu_s=(int(f[11]) + int(f[12])) / _TICKS, minflt=int(f[7]), majflt=int(f[9]),
                        rss_bytes=int(f[21]) * _PAGE)


def parse_proc_io(text: str) -> tuple[int, int]:
    """/proc/PID/io -> (read_bytes, write_bytes) that reached the storage layer."""
    kv = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return int(kv.get("read_bytes", 0)), int(kv.get("write_bytes", 0))


def _read(path: str) -> str:
    """A small /proc or cgroupfs file, with plain system calls (this runs ~10 times per task per second)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 65536).decode()
    finally:
        os.close(fd)


def read_procs(pids: Iterable[int], proc: Path = Path("/proc")) -> ProcCounters:
    total = ProcCounters()
    root = str(proc)
    for pid in pids:
        try:
            c = parse_proc_stat(_read(f"{root}/{pid}/stat"))
        except (OSError, ValueError, IndexError):
            continue  # it exited between the listing and the read
        try:
            rb, wb = parse_proc_io(_read(f"{root}/{pid}/io"))
            c = ProcCounters(c.cpu_s, c.minflt, c.majflt, c.rss_bytes, rb, wb)
        except (OSError, ValueError):
            pass
        total = total + c
    return total


@dataclass(frozen=True)
class TaskSample:
    key: str
    at_unix: float
    #: cores' worth of CPU time per second (1.0 = one core busy all the time)
    cpu_cores: float
    rss_bytes: int
    #: the group's memory (cgroup: RSS plus page cache); RSS without cgroups
    memory_bytes: int
    page_faults_per_s: float
    major_faults_per_s: float
    read_bytes_per_s: float
    write_bytes_per_s: float
    membw: Bandwidth
    pressure: dict[str, Pressure] = field(default_factory=dict)
    gpu_util_pct: float = 0.0
    gpu_memory_used_gb: float = 0.0
    #: where the counters came from: "cgroup v1", "cgroup v2" (+ procfs) or "procfs"
    source: str = "procfs"
    #: cumulative since the task started (what heartbeats carry; the rates above are for /metrics)
    page_faults: int = 0
    read_bytes: int = 0
    write_bytes: int = 0


@dataclass(frozen=True)
class NodeSample:
    at_unix: float
    cpu_util_pct: float
    cpu_cores_busy: float
    mem_used_bytes: int
    mem_total_bytes: int
    membw: Bandwidth
    membw_peak: Bandwidth
    pressure: dict[str, Pressure] = field(default_factory=dict)
    gpus: list[GpuSample] = field(default_factory=list)
    tasks: dict[str, TaskSample] = field(default_factory=dict)


@dataclass(frozen=True)
class _Last:
    at: float
    cpu_s: float
    minflt: int
    majflt: int
    read_bytes: int
    write_bytes: int
    mbm_bytes: int | None


def _rate(new: float, old: float, dt: float) -> float:
    return max(0.0, (new - old) / dt) if dt > 0 else 0.0


class Sampler:
    """Takes a NodeSample when asked; keeps only the previous counters (for rates)."""

    def __init__(self, cores: Iterable[int], cgroups: Cgroups, gpus: Gpus | None = None,
                 calibration: Calibration | None = None, resctrl: Resctrl | None = None,
                 proc: Path = Path("/proc"), clock: Callable[[], float] = time.monotonic) -> None:
        self.cores = tuple(cores)
        self.cgroups = cgroups
        self.gpus = gpus
        self.calibration = calibration
        self.resctrl = resctrl if resctrl is not None and resctrl.available else None
        self.proc = proc
        self.clock = clock
        self._last: dict[str, _Last] = {}
        self._cpu_last: tuple[float, float, float] | None = None  # (at, busy_s, total_s)
        self._node_mbm: tuple[float, int] | None = None

    @property
    def membw_source(self) -> str:
        if self.resctrl is not None:
            return SOURCE_MBM
        return SOURCE_ESTIMATE if self.calibration is not None else SOURCE_NONE

    def _task_pids(self, task: Task) -> list[int]:
        if self.cgroups.kind != "none":  # the shim waits, idle: only the job's processes count
            return [p for p in self.cgroups.members(task.cgroup) if p != task.shim_pid]
        try:
            p = psutil.Process(task.pid)
            return [task.pid, *(c.pid for c in p.children(recursive=True))]
        except psutil.Error:
            return []

    def _bandwidth(self, cpu_cores: float, mbm_rate: float | None) -> Bandwidth:
        if mbm_rate is not None:
            return Bandwidth(mbm_rate, SOURCE_MBM)
        if self.calibration is not None:
            return Bandwidth(self.calibration.estimate(cpu_cores), SOURCE_ESTIMATE)
        return Bandwidth(0.0, SOURCE_NONE)

    def sample_task(self, task: Task, now: float, gpu_samples: dict[int, GpuSample]) -> TaskSample:
        key = str(task.key)
        pids = self._task_pids(task)
        procs = read_procs(pids, self.proc)
        cg = self.cgroups.stats(task.cgroup)
        cpu_s = cg.cpu_usage_s if cg.cpu_usage_s is not None else procs.cpu_s
        minflt = cg.page_faults if cg.page_faults is not None else procs.minflt + procs.majflt
        majflt = cg.major_faults if cg.major_faults is not None else procs.majflt
        rb = cg.read_bytes if cg.read_bytes is not None else procs.read_bytes
        wb = cg.write_bytes if cg.write_bytes is not None else procs.write_bytes
        mbm: int | None = None
        if self.resctrl is not None:
            self.resctrl.track(task.cgroup, pids)
            mbm = self.resctrl.total_bytes(task.cgroup)
        last = self._last.get(key)
        self._last[key] = _Last(now, cpu_s, minflt, majflt, rb, wb, mbm)
        dt = now - last.at if last is not None else 0.0
        cpu = _rate(cpu_s, last.cpu_s, dt) if last else 0.0
        mbm_rate = None
        if last is not None and mbm is not None and last.mbm_bytes is not None:
            mbm_rate = _rate(mbm, last.mbm_bytes, dt)
        gpus = [gpu_samples[i] for i in task.gpu_indices if i in gpu_samples]
        pressure = {r: p for r, t in cg.pressure.items() if (p := parse_pressure(t)) is not None}
        kind = self.cgroups.kind
        return TaskSample(
            key=key,
            at_unix=time.time(),
            cpu_cores=cpu,
            rss_bytes=procs.rss_bytes,
            memory_bytes=cg.memory_bytes if cg.memory_bytes is not None else procs.rss_bytes,
            page_faults_per_s=_rate(minflt, last.minflt, dt) if last else 0.0,
            major_faults_per_s=_rate(majflt, last.majflt, dt) if last else 0.0,
            read_bytes_per_s=_rate(rb, last.read_bytes, dt) if last else 0.0,
            write_bytes_per_s=_rate(wb, last.write_bytes, dt) if last else 0.0,
            membw=Bandwidth(mbm_rate or 0.0, SOURCE_MBM) if self.resctrl is not None else self._bandwidth(cpu, None),
            pressure=pressure,
            gpu_util_pct=sum(g.utilization_pct for g in gpus) / len(gpus) if gpus else 0.0,
            gpu_memory_used_gb=sum(g.memory_used_gb for g in gpus),
            source="procfs" if kind == "none" else f"cgroup {kind} + procfs",
            page_faults=minflt,
            read_bytes=rb,
            write_bytes=wb,
        )

    def _node_cpu(self, now: float) -> tuple[float, float]:
        """(busy cores, utilisation %) of the agent's slice since the previous sample."""
        times = psutil.cpu_times(percpu=True)
        busy = total = 0.0
        for c in self.cores:
            if c < len(times):
                t = times[c]
                idle = t.idle + getattr(t, "iowait", 0.0)
                all_ = sum(t)
                busy += all_ - idle
                total += all_
        last, self._cpu_last = self._cpu_last, (now, busy, total)
        if last is None or total - last[2] <= 0:
            return 0.0, 0.0
        dt = now - last[0]
        busy_cores = _rate(busy, last[1], dt)
        return busy_cores, 100.0 * max(0.0, busy - last[1]) / (total - last[2])

    def sample(self, tasks: Iterable[Task]) -> NodeSample:
        now = self.clock()
        gpu_list = self.gpus.sample() if self.gpus is not None else []
        gpu_samples = {g.index: g for g in gpu_list}
        running = [t for t in tasks if t.alive and t.pid]
        samples = {str(t.key): self.sample_task(t, now, gpu_samples) for t in running}
        for gone in set(self._last) - set(samples):
            del self._last[gone]
            if self.resctrl is not None:
                self.resctrl.forget(gone)
        busy, util = self._node_cpu(now)
        node_bw = self._bandwidth(busy, None)
        if self.resctrl is not None:
            total = self.resctrl.total_bytes()
            last, self._node_mbm = self._node_mbm, ((now, total) if total is not None else None)
            rate = _rate(total, last[1], now - last[0]) if total is not None and last is not None else 0.0
            node_bw = Bandwidth(rate, SOURCE_MBM)
        pressure = {}
        for r in PRESSURE_RESOURCES:
            try:
                p = parse_pressure((self.proc / "pressure" / r).read_text())
            except OSError:
                p = None
            if p is not None:
                pressure[r] = p
        vm = psutil.virtual_memory()
        peak = self.calibration.peak_bytes_per_s if self.calibration is not None else 0.0
        return NodeSample(
            at_unix=time.time(),
            cpu_util_pct=util,
            cpu_cores_busy=busy,
            mem_used_bytes=vm.total - vm.available,
            mem_total_bytes=vm.total,
            membw=node_bw,
            membw_peak=Bandwidth(peak, "copy-benchmark" if peak else SOURCE_NONE),
            pressure=pressure,
            gpus=gpu_list,
            tasks=samples,
        )
