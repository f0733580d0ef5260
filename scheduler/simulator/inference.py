"""The simulated inference cluster: its servers and how many of them its load needs over time.

The demand is a step function (time, servers needed): generated with a diurnal shape, the
pattern Lyra's Figure 1 shows for production inference, or read from a CSV with the header
`time_s,servers`. The orchestrator (`loaning/orchestrator.py`) loans the rest to training.
"""
from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass
from pathlib import Path

from synergy.scheduler.model import Resources, Server, ServerPool
from synergy.scheduler.simulator.errors import SimInputError

DAY_S = 24 * 3600.0
#: Diurnal demand as a fraction of the pool: lowest at 04:00, highest at 16:00.
DIURNAL_LOW, DIURNAL_HIGH, DIURNAL_PEAK_S = 0.2, 1.0, 16 * 3600.0
#: The generated trace changes every this many seconds (Lyra's orchestrator runs every 5 min).
DIURNAL_STEP_S = 300.0
#: Seconds of a job's running time between its checkpoints: a preempted job loses the work
#: done since the last one (on average half of this).
DEFAULT_CHECKPOINT_S = 1800.0
CSV_COLUMNS = ("time_s", "servers")


@dataclass(frozen=True)
class Demand:
    """Servers needed by inference from each time on (times ascending, the first at 0 or later)."""

    times: tuple[float, ...]
    servers: tuple[int, ...]
    #: The steps repeat with this period (the generated day); None = the last step holds.
    period_s: float | None = None

    def at(self, t: float) -> int:
        if self.period_s is not None:
            t = t % self.period_s
        i = bisect.bisect_right(self.times, t) - 1
        return self.servers[max(0, i)]


@dataclass(frozen=True)
class InferencePool:
    servers: tuple[Server, ...]
    demand: Demand
    checkpoint_s: float = DEFAULT_CHECKPOINT_S


def diurnal(n: int) -> Demand:
    """A cosine day between DIURNAL_LOW and DIURNAL_HIGH of `n` servers, in 5-minute steps, repeated."""
    steps = int(DAY_S / DIURNAL_STEP_S)
    times, need = [], []
    for i in range(steps):
        t = i * DIURNAL_STEP_S
        phase = math.cos(2 * math.pi * (t - DIURNAL_PEAK_S) / DAY_S)
        frac = DIURNAL_LOW + (DIURNAL_HIGH - DIURNAL_LOW) * (1 + phase) / 2
        times.append(t)
        need.append(min(n, max(0, round(frac * n))))
    return Demand(tuple(times), tuple(need), DAY_S)


def read_demand(path: str, n: int) -> Demand:
    """A `time_s,servers` CSV; every problem is one line naming the flag, the file and the row."""
    where = f"--inference-trace {path}"
    try:
        with Path(path).open(newline="") as f:
            rows = list(csv.reader(f))
    except OSError as exc:
        raise SimInputError(f"{where}: {exc.strerror or exc}") from None
    if not rows or tuple(c.strip() for c in rows[0]) != CSV_COLUMNS:
        raise SimInputError(f"{where}: the header must be {','.join(CSV_COLUMNS)}")
    times: list[float] = []
    need: list[int] = []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            t, s = float(row[0]), int(row[1])
        except (ValueError, IndexError):
            raise SimInputError(f"{where} line {line}: expected a time in seconds and a whole number of servers") from None
        if not (math.isfinite(t) and t >= 0) or (times and t <= times[-1]):
            raise SimInputError(f"{where} line {line}: time_s must be >= 0 and increasing, got {row[0]}")
        if not 0 <= s <= n:
            raise SimInputError(f"{where} line {line}: servers must be 0..{n} (--inference-servers), got {s}")
        times.append(t)
        need.append(s)
    if not times:
        raise SimInputError(f"{where}: no rows")
    return Demand(tuple(times), tuple(need))


def build_pool(n: int, trace: str, capacity: Resources, checkpoint_s: float = DEFAULT_CHECKPOINT_S) -> InferencePool:
    """`n` inference servers like the training ones ("i0", ...), and their demand trace."""
    servers = tuple(Server(f"i{k}", capacity, pool=ServerPool.LOANED) for k in range(n))
    demand = diurnal(n) if trace == "diurnal" else read_demand(trace, n)
    return InferencePool(servers, demand, checkpoint_s)
