"""The agent's own Prometheus `/metrics`: node and per-task gauges from the latest sample, and counters.

A private registry (no module-level state) with one collector that reads, at scrape time,
the agent's latest `NodeSample` (a frozen dataclass the loop replaces whole, so the HTTP
thread never sees half a sample) and the supervisor's and contention eliminator's
running totals. The server listens on `--metrics-host:--metrics-port` (port 0 picks a free
one) and writes the address it got to `WORK_DIR/metrics.address`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from synergy.common.files import write_atomically
from synergy.agent.tasks import TaskCounts
from synergy.agent.telemetry import NodeSample

ADDRESS_FILE = "metrics.address"
P = "synergy_agent_"


@dataclass
class MetricsSources:
    """What the collector reads at scrape time."""

    node_id: str
    latest: Callable[[], NodeSample | None]
    counts: TaskCounts
    #: action ("throttle", "restore") -> count, from the contention eliminator
    actions: Callable[[], dict[str, int]] = dict


class _Collector:
    def __init__(self, src: MetricsSources) -> None:
        self.src = src

    def collect(self) -> Iterator[Metric]:
        src, node = self.src, self.src.node_id
        c = src.counts
        launches = CounterMetricFamily(P + "task_launches", "Tasks launched (and re-adopted after a restart)",
                                       labels=["node", "how"])
        launches.add_metric([node, "launched"], c.launched)
        launches.add_metric([node, "readopted"], c.readopted)
        yield launches
        exits = CounterMetricFamily(P + "task_exits", "Task exits by kind", labels=["node", "kind"])
        for kind, n in list(c.exits.items()):
            exits.add_metric([node, kind], n)
        yield exits
        yield _counter(P + "oom_kills", "Processes killed by a task's memory limit", node, c.oom_kills)
        actions = CounterMetricFamily(P + "contention_actions", "CODA contention eliminator actions",
                                      labels=["node", "action"])
        for action, n in sorted(src.actions().items()):
            actions.add_metric([node, action], n)
        yield actions
        s = src.latest()
        if s is None:
            return
        yield from _node_gauges(node, s)
        yield from _task_gauges(node, s)


def _counter(name: str, doc: str, node: str, value: float) -> CounterMetricFamily:
    m = CounterMetricFamily(name, doc, labels=["node"])
    m.add_metric([node], value)
    return m


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(P + name, doc, labels=labels)


def _node_gauges(node: str, s: NodeSample) -> Iterator[Metric]:
    plain = [
        ("node_cpu_cores_busy", "Busy cores of the agent's slice", s.cpu_cores_busy),
        ("node_cpu_utilization_ratio", "CPU utilisation of the agent's slice (0-1)", s.cpu_util_pct / 100),
        ("node_memory_used_bytes", "Memory in use on the machine", s.mem_used_bytes),
        ("node_tasks_running", "Tasks running", len(s.tasks)),
    ]
    for name, doc, value in plain:
        g = _gauge(name, doc, ["node"])
        g.add_metric([node], value)
        yield g
    bw = _gauge("node_membw_bytes_per_second", "Memory bandwidth of the node (source: resctrl-mbm or estimate)",
                ["node", "source"])
    bw.add_metric([node, s.membw.source], s.membw.bytes_per_s)
    yield bw
    peak = _gauge("node_membw_peak_bytes_per_second", "Calibrated peak memory bandwidth", ["node", "source"])
    peak.add_metric([node, s.membw_peak.source], s.membw_peak.bytes_per_s)
    yield peak
    psi = _gauge("node_pressure_some_avg10_ratio", "PSI: share of the last 10 s some task stalled (0-1)",
                 ["node", "resource"])
    for r, p in s.pressure.items():
        psi.add_metric([node, r], p.some_avg10 / 100)
    yield psi
    gu = _gauge("node_gpu_utilization_ratio", "GPU utilisation (0-1)", ["node", "gpu"])
    gm = _gauge("node_gpu_memory_used_bytes", "GPU memory in use", ["node", "gpu"])
    for g in s.gpus:
        gu.add_metric([node, str(g.index)], g.utilization_pct / 100)
        gm.add_metric([node, str(g.index)], g.memory_used_gb * 1024**3)
    yield gu
    yield gm


_TASK_GAUGES = (
    ("task_cpu_cores", "CPU time per second (cores)", "cpu_cores"),
    ("task_rss_bytes", "Resident memory of the task's processes", "rss_bytes"),
    ("task_memory_bytes", "Memory charged to the task's cgroup", "memory_bytes"),
    ("task_page_faults_per_second", "Page faults per second", "page_faults_per_s"),
    ("task_major_faults_per_second", "Major page faults per second", "major_faults_per_s"),
    ("task_read_bytes_per_second", "Bytes read from storage per second", "read_bytes_per_s"),
    ("task_write_bytes_per_second", "Bytes written to storage per second", "write_bytes_per_s"),
)


def _task_gauges(node: str, s: NodeSample) -> Iterator[Metric]:
    for name, doc, attr in _TASK_GAUGES:
        g = _gauge(name, doc, ["node", "task"])
        for key, t in s.tasks.items():
            g.add_metric([node, key], getattr(t, attr))
        yield g
    bw = _gauge("task_membw_bytes_per_second", "Memory bandwidth of the task (source: resctrl-mbm or estimate)",
                ["node", "task", "source"])
    psi = _gauge("task_pressure_some_avg10_ratio", "PSI of the task's cgroup (0-1)", ["node", "task", "resource"])
    gpu = _gauge("task_gpu_utilization_ratio", "Mean utilisation of the task's GPUs (0-1)", ["node", "task"])
    for key, t in s.tasks.items():
        bw.add_metric([node, key, t.membw.source], t.membw.bytes_per_s)
        gpu.add_metric([node, key], t.gpu_util_pct / 100)
        for r, p in t.pressure.items():
            psi.add_metric([node, key, r], p.some_avg10 / 100)
    yield bw
    yield psi
    yield gpu


class MetricsServer:
    """The /metrics endpoint; `address` is where it listens."""

    def __init__(self, src: MetricsSources) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(src))  # type: ignore[arg-type]
        self._httpd = None
        self.address = ""

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def start(self, host: str, port: int, work_dir: Path) -> str:
        self._httpd, _ = start_http_server(port, addr=host, registry=self.registry)
        self.address = f"{host}:{self._httpd.server_port}"
        write_atomically(work_dir / ADDRESS_FILE, (self.address + "\n").encode())
        return self.address

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
