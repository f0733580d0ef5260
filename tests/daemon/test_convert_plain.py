"""`convert.plain` gives MessageToDict's dict for every message a heartbeat carries.

The heartbeat's telemetry and task usage are stored, shown (describe, the dashboard) and
turned back into messages (ParseDict) as these dicts; a faster conversion that differed in
one corner of the JSON mapping (a 64-bit count as a number, a NaN as a float) would change
what users see. Compared as JSON text, so 5 and 5.0, or "1" and 1, count as different.
"""

from __future__ import annotations

import json

from google.protobuf.json_format import MessageToDict
from hypothesis import given, settings, strategies as st

from synergy.scheduler.daemon.servicers.convert import plain
from synergy.v1 import admin_pb2, common_pb2, node_pb2

_doubles = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1.5, 100.0])
_u64 = st.integers(0, 2**64 - 1)
_u32 = st.integers(0, 2**32 - 1)
_text = st.text(max_size=8)


def _bandwidth() -> st.SearchStrategy[common_pb2.MemoryBandwidth]:
    return st.builds(common_pb2.MemoryBandwidth, gb_per_s=_doubles, source=_text)


def _pressure() -> st.SearchStrategy[common_pb2.Pressure]:
    return st.builds(common_pb2.Pressure, some_avg10=_doubles, full_avg10=_doubles)


def _usage() -> st.SearchStrategy[common_pb2.ResourceUsage]:
    return st.builds(
        common_pb2.ResourceUsage, cpu_cores=_doubles, rss_bytes=_u64, page_faults=_u64, io_read_bytes=_u64,
        io_write_bytes=_u64, cpu_pressure=st.none() | _pressure(), memory_pressure=st.none() | _pressure(),
        mem_bandwidth=st.none() | _bandwidth(), gpu_util_pct=_doubles, gpu_memory_used_gb=_doubles,
    )


def _telemetry() -> st.SearchStrategy[common_pb2.NodeTelemetry]:
    gpu = st.builds(common_pb2.GpuTelemetry, index=_u32, utilization_pct=_doubles, memory_used_gb=_doubles,
                    temperature_c=_doubles)
    return st.builds(
        common_pb2.NodeTelemetry, collected_at_unix_s=_doubles, cpu_util_pct=_doubles, mem_used_gb=_doubles,
        load_avg_1m=_doubles, gpus=st.lists(gpu, max_size=3), usage=st.none() | _usage(),
        peak_mem_bandwidth=st.none() | _bandwidth(), sampled_by=_text,
    )


def _same(msg: object) -> None:
    expected = MessageToDict(msg, preserving_proto_field_name=True)  # type: ignore[arg-type]
    assert json.dumps(plain(msg)) == json.dumps(expected)  # type: ignore[arg-type]


@settings(max_examples=300)
@given(_telemetry())
def test_a_node_telemetry_converts_as_message_to_dict_does(msg: common_pb2.NodeTelemetry) -> None:
    _same(msg)


@settings(max_examples=200)
@given(_usage(), st.builds(common_pb2.TaskThrottle, level=_u32, action=_text, since_unix_s=_doubles, reason=_text))
def test_a_tasks_usage_and_throttle_convert_as_message_to_dict_does(
    usage: common_pb2.ResourceUsage, throttle: common_pb2.TaskThrottle
) -> None:
    _same(usage)
    _same(throttle)


def test_the_corners_of_the_json_mapping() -> None:
    """64-bit counts as strings, non-finite numbers by their JSON names, unset fields absent."""
    u = common_pb2.ResourceUsage(rss_bytes=2**60, cpu_cores=float("nan"), gpu_util_pct=float("-inf"))
    assert plain(u) == {"cpu_cores": "NaN", "rss_bytes": "1152921504606846976", "gpu_util_pct": "-Infinity"}
    assert plain(common_pb2.GpuInfo(index=3, memory_gb=80.0)) == {"index": 3, "memory_gb": 80.0}
    assert plain(common_pb2.NodeTelemetry()) == {}


def test_types_it_does_not_convert_itself_go_to_message_to_dict() -> None:
    """Enums (a task's state), maps (a spec's env), bytes: MessageToDict's forms, not ours."""
    status = node_pb2.TaskStatus(state=node_pb2.TASK_STATE_RUNNING, pid=7, usage=common_pb2.ResourceUsage(rss_bytes=5))
    assert plain(status)["state"] == "TASK_STATE_RUNNING"
    _same(status)
    spec = admin_pb2.JobSpec(name="a", env={"K": "v"}, gpus=1)
    assert plain(spec)["env"] == {"K": "v"}
    _same(spec)
