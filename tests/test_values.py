"""Value objects (synergy.common.values) are write-once under test, whichever module defines them."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from synergy.common.tasks import TaskKey, TaskPhase
from synergy.scheduler.daemon.leases import LeaseAction, Renewal
from synergy.scheduler.daemon.live import ObservedTask
from synergy.scheduler.model import Allocation, Placement, Resources


@pytest.mark.parametrize("cls", [Resources, Placement, Allocation, TaskKey, ObservedTask, Renewal])
def test_every_value_type_is_a_slots_dataclass_guarded_under_test(cls: type) -> None:
    """Listed in its module's VALUE_TYPES (conftest.py guards those), slots, not frozen."""
    assert cls.__setattr__.__name__ == "_write_once"
    assert "__slots__" in vars(cls) and not cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


@pytest.mark.parametrize("obj, name", [
    (TaskKey(1, 1, 0), "rank"),
    (ObservedTask(TaskKey(1, 1, 0), TaskPhase.RUNNING, pid=7, cores=(1, 2)), "cores"),
    (Renewal(LeaseAction.CONTINUE, None, 5.0), "expires_at"),  # type: ignore[arg-type]
])
def test_a_value_object_cannot_be_assigned_or_deleted(obj: object, name: str) -> None:
    with pytest.raises(FrozenInstanceError):
        setattr(obj, name, getattr(obj, name))
    with pytest.raises(FrozenInstanceError):
        delattr(obj, name)


def test_task_keys_compare_hash_and_order_by_value() -> None:
    """As the frozen dataclass they were: by (job, attempt, rank), never equal to a bare tuple."""
    keys = [TaskKey(2, 1, 0), TaskKey(1, 2, 0), TaskKey(1, 1, 3), TaskKey(1, 1, 0)]
    assert sorted(keys) == [TaskKey(1, 1, 0), TaskKey(1, 1, 3), TaskKey(1, 2, 0), TaskKey(2, 1, 0)]
    assert {TaskKey(1, 1, 0): "a"}[TaskKey(1, 1, 0)] == "a"
    assert TaskKey(1, 1, 0) != (1, 1, 0)
    a, b = ObservedTask(TaskKey(1, 1, 0), TaskPhase.RUNNING), ObservedTask(TaskKey(1, 1, 0), TaskPhase.RUNNING)
    assert a == b and hash(a) == hash(b)
    assert a.usage == {} and a.usage is not b.usage  # a fresh dict each (default_factory)
