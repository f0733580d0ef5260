"""Snapshot-then-persist (CheckFreq): a periodic checkpoint off the training thread.

The training thread copies `state` and its position to CPU memory at a step boundary
(`snapshot_copy`: a memcpy into the previous snapshot's buffers, ~40 ms for 256 MB; the
wrap keeps one copy of the state resident for it) and hands the copy to
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


def snapshot_copy(obj: Any, into: Any = None) -> Any:
    """A deep copy the training thread may keep mutating `obj` after: tensors copied to CPU,
    containers rebuilt, everything else (ints, strings, RNG state) shared as Python shares it.

    `into`: the previous snapshot (its write finished): a tensor of the same shape and dtype
    there is overwritten in place instead of allocated again. That is CheckFreq's reused
    snapshot buffer: a copy into memory already mapped runs ~2.5x faster than a fresh clone,
    which pays a page fault per 4 KiB, and the snapshot is the only pause training sees."""
    if isinstance(obj, torch.Tensor):
        src = obj.detach()
        if (isinstance(into, torch.Tensor) and into.shape == src.shape and into.dtype == src.dtype
                and into.layout == src.layout == torch.strided and into.device.type == "cpu"
                and into.is_contiguous()):
            return into.copy_(src)
        return src.to("cpu", copy=True)
    if isinstance(obj, dict):
        out = copy.copy(obj)  # keeps the type and its attributes (a state_dict's `_metadata`)
        prev = into if isinstance(into, dict) else {}
        for k, v in obj.items():
            out[k] = snapshot_copy(v, prev.get(k))
        return out
    if isinstance(obj, list):
        prev = into if isinstance(into, list) and len(into) == len(obj) else [None] * len(obj)
        return [snapshot_copy(v, p) for v, p in zip(obj, prev)]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        prev = into if isinstance(into, tuple) and len(into) == len(obj) else (None,) * len(obj)
        return tuple(snapshot_copy(v, p) for v, p in zip(obj, prev))
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
