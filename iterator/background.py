"""Snapshot-then-persist (CheckFreq): a periodic checkpoint off the training thread.

The training thread copies `state` and its position to CPU memory at a step boundary
(`snapshot_copy`: a memcpy, tens of ms for hundreds of MB) and hands the copy to
`BackgroundWriter`, whose thread serialises, writes and fsyncs it while training goes on,
then reports it. One write at a time: a snapshot due while the previous one is still being
written is skipped (the caller says so), and a stop waits for the write in flight before it
writes its own, so no two writers ever race on a checkpoint dir.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from synergy.iterator import checkpoint
from synergy.iterator.checkpoint import CheckpointError


def snapshot_copy(obj: Any) -> Any:
    """A deep copy the training thread may keep mutating `obj` after: tensors cloned to CPU,
    containers rebuilt, everything else (ints, strings, RNG state bytes) copied by reference
    or by value as Python already shares it immutably."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        out = copy.copy(obj)  # keeps the type and its attributes (a state_dict's `_metadata`)
        for k, v in obj.items():
            out[k] = snapshot_copy(v)
        return out
    if isinstance(obj, list):
        return [snapshot_copy(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(snapshot_copy(v) for v in obj)
    return obj


@dataclass(frozen=True)
class Written:
    """The outcome of one background write."""

    step: int
    #: The step dir (the checkpoint's path).
    path: Path
    size: int = 0
    seconds: float = 0.0
    error: CheckpointError | None = None


class BackgroundWriter:
    """Writes one snapshot at a time on a daemon thread; `on_done` runs there afterwards."""

    def __init__(self, on_done: Callable[[Written], None]) -> None:
        self.on_done = on_done
        self._thread: threading.Thread | None = None
        #: Step of the write in flight (0 = none).
        self.step = 0

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, step: int, data: dict[str, Any], path: Path) -> bool:
        """Start writing `data` (already a snapshot copy) to `path`; False when busy."""
        if self.busy:
            return False
        self.step = step
        self._thread = threading.Thread(target=self._write, args=(step, data, path), daemon=True,
                                        name=f"synergy-checkpoint-{step}")
        self._thread.start()
        return True

    def wait(self, timeout: float | None = None) -> None:
        """Until the write in flight (and its report) is done."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _write(self, step: int, data: dict[str, Any], path: Path) -> None:
        t = time.monotonic()
        try:
            size = checkpoint.atomic_save(data, path)
            done = Written(step, path.parent, size, time.monotonic() - t)
        except CheckpointError as exc:
            done = Written(step, path.parent, error=exc)
        del data
        self.on_done(done)
