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
