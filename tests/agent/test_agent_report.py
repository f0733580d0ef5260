"""Samples -> the daemon's messages (agent/report.py), checked by the daemon's own validation, and
the daemon's progress -> the eliminator's throughput (agent/contention.py)."""

from __future__ import annotations

from synergy.agent.bandwidth import SOURCE_ESTIMATE, SOURCE_MBM, SOURCE_NONE, Bandwidth
from synergy.agent.contention import Throughput
from synergy.agent.report import Hold, bandwidth_msg, node_telemetry_extras, pct, task_usage
from synergy.agent.telemetry import NodeSample, Pressure, TaskSample
from synergy.scheduler.daemon import validation
from synergy.v1 import common_pb2


def _task(**kw: object) -> TaskSample:
    base = dict(key="1-1-0", at_unix=1.0, cpu_cores=0.9, rss_bytes=64 << 20, memory_bytes=64 << 20,
                page_faults_per_s=10.0, major_faults_per_s=0.0, read_bytes_per_s=0.0, write_bytes_per_s=0.0,
                membw=Bandwidth(14e9, SOURCE_ESTIMATE), pressure={"cpu": Pressure(1.5, 0.0)},
                page_faults=5000, read_bytes=10, write_bytes=4096)
    return TaskSample(**{**base, **kw})  # type: ignore[arg-type]


def _node(**kw: object) -> NodeSample:
    base = dict(at_unix=1.0, cpu_util_pct=100.00000000009095, cpu_cores_busy=2.0, mem_used_bytes=1 << 30,
                mem_total_bytes=8 << 30, membw=Bandwidth(20e9, SOURCE_ESTIMATE),
                membw_peak=Bandwidth(25e9, "copy-benchmark"), pressure={"io": Pressure(0.1, 0.1)})
    return NodeSample(**{**base, **kw})  # type: ignore[arg-type]


def test_task_usage_carries_cumulative_counters_and_the_bandwidth_source() -> None:
    u = task_usage(_task())
    validation.measurements(u, "tasks[0].usage")
    assert (u.cpu_cores, u.rss_bytes, u.page_faults, u.io_write_bytes) == (0.9, 64 << 20, 5000, 4096)
    assert (u.mem_bandwidth.gb_per_s, u.mem_bandwidth.source) == (14.0, "estimate")
    assert u.cpu_pressure.some_avg10 == 1.5 and not u.HasField("memory_pressure")  # unmeasured stays unset


def test_bandwidth_sources_map_to_the_protocol_words_and_none_stays_unset() -> None:
    assert bandwidth_msg(Bandwidth(1e9, SOURCE_MBM)).source == "resctrl"
    assert bandwidth_msg(Bandwidth(1e9, "copy-benchmark")).source == "estimate"
    assert bandwidth_msg(Bandwidth(0.0, SOURCE_NONE)) is None
    assert not task_usage(_task(membw=Bandwidth(0.0, SOURCE_NONE))).HasField("mem_bandwidth")


def test_node_telemetry_passes_the_daemons_validation_even_past_100_percent_by_rounding() -> None:
    """Regression: a counter-delta ratio of 100.00000000009 % made synergyd refuse the heartbeat and the agent exit."""
    s = _node()
    t = common_pb2.NodeTelemetry(cpu_util_pct=pct(s.cpu_util_pct))
    node_telemetry_extras(t, s)
    validation.measurements(t, "telemetry")
    assert t.cpu_util_pct == 100.0 and pct(float("nan")) == 0.0 and pct(-1.0) == 0.0
    assert (t.usage.cpu_cores, t.usage.mem_bandwidth.source, t.peak_mem_bandwidth.gb_per_s) == (2.0, "estimate", 25.0)


def test_a_hold_becomes_a_task_throttle_the_daemon_accepts() -> None:
    m = Hold(1, "cpu quota halved to 0.5 cores", 1795429850.0, "x" * 5000).to_msg()
    validation.throttle(m, "tasks[0].throttle")
    assert m.level == 1 and len(m.reason) == 1000


def test_the_daemons_progress_wins_over_gpu_utilisation_and_replaces_the_previous_view() -> None:
    t = Throughput()
    t.progress({"g": (300.0, 400.0)})
    assert t.observe({"g": 90.0}, uncontended=True) == {"g": (300.0, 400.0)}  # its baseline, not a learnt one
    t.progress({})  # the job stopped reporting: back to GPU utilisation with a learnt baseline
    assert t.observe({"g": 90.0}, uncontended=True) == {"g": (90.0, 90.0)}
    t.progress({"g": (50.0, 0.0)})  # a report without a baseline yet: the learnt one stands
    assert t.observe({"g": 0.0}, uncontended=False)["g"][0] == 50.0
