"""synergyd's garbage-collection policy (collector.py): full collections walk only what is
new since the last one, and the hourly sweep still frees cycles among frozen objects."""

from __future__ import annotations

import gc
import weakref
from typing import Iterator

import pytest

from synergy.scheduler.daemon import collector


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def freezing() -> Iterator[None]:
    collector.freeze_after_full_collections()
    try:
        yield
    finally:
        collector.stop_freezing()
    assert gc.get_freeze_count() == 0


def test_a_full_collection_freezes_what_survived_it(freezing: None) -> None:
    kept = [Node() for _ in range(100)]
    gc.collect()
    frozen = gc.get_freeze_count()
    assert frozen >= len(kept)  # the next full collection does not walk them
    more = [Node() for _ in range(100)]
    gc.collect()
    assert gc.get_freeze_count() >= frozen + len(more)
    collector.freeze_after_full_collections()  # once per process: a second call adds nothing
    assert gc.callbacks.count(collector._freeze) == 1


def test_the_sweep_frees_a_cycle_among_frozen_objects(freezing: None) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    gc.collect()  # both survive (referenced here), and are frozen
    del a, b  # now unreachable, a cycle: only a collection can free it
    gc.collect()
    assert gone() is not None  # frozen: the full collection did not walk it
    assert collector.sweep() >= 2
    assert gone() is None


def test_a_young_collection_frees_young_cycles_and_freezes_what_survived(freezing: None) -> None:
    """Every `YOUNG_S` synergyd collects the young generations and freezes the survivors:
    no later collection walks them (the old generation holds nothing unfrozen), while a
    cycle that was already garbage is freed."""
    collector.collect_young()
    kept = [Node() for _ in range(1000)]
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    frozen = gc.get_freeze_count()
    assert collector.collect_young() >= 2 and gone() is None
    assert gc.get_freeze_count() >= frozen + len(kept)
    assert not [o for o in gc.get_objects(generation=2) if isinstance(o, Node)]


def test_synergyd_runs_the_young_collection_among_its_events() -> None:
    from synergy.scheduler.daemon.events import GcYoungEvent
    from synergy.scheduler.daemon.main import EVENTS

    assert GcYoungEvent in EVENTS
    assert GcYoungEvent.interval_s.fget(None) == collector.YOUNG_S <= 1.0  # type: ignore[attr-defined]
