"""A node's task reports are checked field by field, each error naming `tasks[i].<field>`.

The checks run for every task of every heartbeat, so they spell a field's path only when a
rule fails (validation.task_status, validation.observed_task): each bad field below must
still be refused with its own path, and a good report must pass unchanged.
"""

from __future__ import annotations

import math

import pytest

from synergy.scheduler.daemon.errors import InvalidArgument
from synergy.scheduler.daemon.servicers.node_servicer import NodeServicer
from synergy.scheduler.daemon.validation import MAX_CORES_PER_NODE, MAX_COUNTER, MAX_GPUS_PER_NODE
from synergy.v1 import common_pb2, node_pb2


def good(job_id: int = 1) -> node_pb2.TaskStatus:
    return node_pb2.TaskStatus(
        ref=node_pb2.TaskRef(job_id=job_id, attempt=1, rank=0), state=node_pb2.TASK_STATE_RUNNING, pid=42,
        message="ok", cores=[1, 2], placement=common_pb2.Placement(node_id="n", gpus=1, cpus=2.5, mem_gb=10.0),
        usage=common_pb2.ResourceUsage(cpu_cores=1.5, rss_bytes=10**9, gpu_util_pct=80.0))


def bad(**change) -> node_pb2.TaskStatus:
    t = good(2)
    for path, value in change.items():
        *parents, name = path.split("__")
        msg = t
        for p in parents:
            msg = getattr(msg, p)
        if isinstance(value, list):
            getattr(msg, name).extend(value)
        else:
            setattr(msg, name, value)
    return t


@pytest.mark.parametrize("change, field", [
    ({"message": "x" * (64 * 1024 + 1)}, "tasks[1].message"),
    ({"cores": list(range(MAX_CORES_PER_NODE))}, "tasks[1].cores"),
    ({"usage__cpu_cores": -1.0}, "tasks[1].usage.cpu_cores"),
    ({"usage__gpu_util_pct": 101.0}, "tasks[1].usage.gpu_util_pct"),
    ({"throttle__reason": "x" * 1025}, "tasks[1].throttle.reason"),
    ({"ref__job_id": MAX_COUNTER + 1}, "tasks[1].ref.job_id"),
    ({"ref__attempt": MAX_COUNTER + 1}, "tasks[1].ref.attempt"),
    ({"placement__cpus": -0.5}, "tasks[1].placement.cpus"),
    ({"placement__cpus": math.inf}, "tasks[1].placement.cpus"),
    ({"placement__mem_gb": math.nan}, "tasks[1].placement.mem_gb"),
    ({"placement__gpus": MAX_GPUS_PER_NODE + 1}, "tasks[1].placement.gpus"),
])
def test_each_bad_field_of_a_task_report_is_refused_by_its_path(change: dict, field: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        NodeServicer._tasks([good(), bad(**change)], "n")
    assert exc.value.field == field


def test_a_good_task_report_converts_whole() -> None:
    (task,) = NodeServicer._tasks([good()], "n")
    assert (task.key.job_id, task.pid, task.cores, task.message) == (1, 42, (1, 2), "ok")
    assert (task.placement.server_id, task.placement.cpus, task.usage["cpu_cores"]) == ("n", 2.5, 1.5)
