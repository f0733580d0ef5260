"""Time as an injected dependency, so the round loop and leases can be tested without sleeping."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch (persisted timestamps use it)."""
        ...

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        """Sleep up to `seconds`; returns True early when `stop` is set."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        return stop.wait(max(0.0, seconds))


@dataclass
class ManualClock:
    """A clock that moves only when told to: unit tests advance it explicitly."""

    t: float = 1_000_000.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def now(self) -> float:
        with self._lock:
            return self.t

    def advance(self, seconds: float) -> float:
        with self._lock:
            self.t += seconds
            return self.t

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        self.advance(seconds)
        return stop.is_set()
