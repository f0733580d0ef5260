"""Memory bandwidth: measured (resctrl MBM) where the machine offers it, else estimated.

Every figure travels with its source (`Bandwidth.source`), because an estimate must
never pass for a measurement:

* `resctrl-mbm`: Intel RDT / AMD PQoS memory-bandwidth monitoring. The agent creates one
  monitoring group per task under `/sys/fs/resctrl/mon_groups/` and reads the
  `mbm_total_bytes` counters of every L3 domain (node: the root group's counters).
* `estimate`: where resctrl has no MBM (this development machine, most VMs, no perf
  counters either): memory traffic cannot be read, so it is bounded from what can be. A
  short numpy copy benchmark at start-up (`calibrate`) measures the rate one core reaches
  (bytes per second of the copying thread's CPU time) and the node's peak (bytes per
  wall-clock second of a copy thread on every core of the slice at once), each the best of
  `CALIBRATION_RUNS` short runs: interference from other processes can only lower a copy
  rate, so the best run is the one nearest the hardware. A task's bandwidth is then its CPU
  time per second x that per-core rate, capped at the peak: what the task would move if it
  streamed memory all the time it runs, an upper bound that is exact for a copy loop and
  over-states compute-bound tasks. CODA's policy needs the ranking of CPU-only tasks and the
  node's closeness to its peak; whether the training job actually suffers is decided on its
  own reported throughput, not on this figure. The calibration is cached in the work dir
  (`bandwidth.json`), keyed by the cores.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

RESCTRL = Path("/sys/fs/resctrl")
SOURCE_MBM = "resctrl-mbm"
SOURCE_ESTIMATE = "estimate"
SOURCE_NONE = "none"
CALIBRATION_FILE = "bandwidth.json"
#: bytes moved by one np.copyto of an array of n bytes: n read + n written
_COPY_FACTOR = 2
_ARRAY_BYTES = 32 * 1024**2
#: short runs per calibrated figure, the best one kept
CALIBRATION_RUNS = 3


@dataclass(frozen=True)
class Bandwidth:
    """A memory-bandwidth figure (bytes per second) and where it comes from."""

    bytes_per_s: float
    source: str

    @property
    def gb_per_s(self) -> float:
        return self.bytes_per_s / 1e9


@dataclass(frozen=True)
class Calibration:
    """What the copy benchmark measured on the agent's cores."""

    peak_bytes_per_s: float
    per_core_bytes_per_s: float
    cores: tuple[int, ...]
    seconds: float

    def estimate(self, cpu_cores: float) -> float:
        """Bandwidth of a task using `cpu_cores` cores' worth of CPU time per second."""
        return min(self.peak_bytes_per_s, max(0.0, cpu_cores) * self.per_core_bytes_per_s)


def _copy_rate(seconds: float, threads: int, cores: tuple[int, ...]) -> float:
    """Bytes per second that `threads` threads copying arrays reach together (numpy drops the GIL).

    One thread: per second of its own CPU time, the unit the estimate multiplies (CPU cores x
    rate), and blind to time other processes take from its core. Several: per wall-clock second,
    since the peak is what they reach at once.
    """
    import numpy as np

    moved = [0] * threads
    cpu = [0.0] * threads
    start = threading.Barrier(threads + 1)

    def work(i: int) -> None:
        if cores:
            try:
                os.sched_setaffinity(0, {cores[i % len(cores)]})
            except OSError:
                pass
        a = np.ones(_ARRAY_BYTES // 8)
        b = np.empty_like(a)
        np.copyto(b, a)  # page the arrays in before timing
        start.wait()
        c0 = time.thread_time()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            np.copyto(b, a)
            moved[i] += _COPY_FACTOR * a.nbytes
        cpu[i] = time.thread_time() - c0

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    if threads == 1:
        return moved[0] / max(cpu[0], 1e-9)
    return sum(moved) / max(time.perf_counter() - t0, 1e-9)


def calibrate(cores: Iterable[int], seconds: float = 0.3, work_dir: Path | None = None) -> Calibration:
    """Per-core rate (one thread) and peak (one thread per core, at most 8) of a numpy copy loop,
    each the best of `CALIBRATION_RUNS` runs sharing `seconds`.

    A cached calibration for the same cores in `work_dir` is reused (restarts stay fast).
    """
    cores = tuple(sorted(cores))
    cache = work_dir / CALIBRATION_FILE if work_dir is not None else None
    if cache is not None:
        try:
            raw = json.loads(cache.read_text())
            raw["cores"] = tuple(raw["cores"])
            c = Calibration(**raw)
            if c.cores == cores and c.peak_bytes_per_s > 0:
                return c
        except (OSError, ValueError, TypeError, KeyError):
            pass
    each = max(seconds / (2 * CALIBRATION_RUNS), 0.01)
    one = max(_copy_rate(each, 1, cores[:1]) for _ in range(CALIBRATION_RUNS))
    n = max(1, min(len(cores), 8))
    peak = max(one, max(_copy_rate(each, n, cores) for _ in range(CALIBRATION_RUNS)) if n > 1 else one)
    c = Calibration(peak, one, cores, seconds)
    if cache is not None:
        try:
            cache.write_text(json.dumps(asdict(c)))
        except OSError:
            pass
    return c


class Resctrl:
    """resctrl memory-bandwidth monitoring: one mon group per task, counters summed over L3 domains."""

    def __init__(self, root: Path = RESCTRL, prefix: str = "synergy") -> None:
        self.root = Path(root)
        self.prefix = prefix

    @property
    def available(self) -> bool:
        return any(self.root.glob("mon_data/mon_L3_*/mbm_total_bytes"))

    def _group(self, name: str) -> Path:
        return self.root / "mon_groups" / f"{self.prefix}-{name}"

    def total_bytes(self, name: str = "") -> int | None:
        """Cumulative bytes of a task's group (`name`), or of the whole machine (`""`)."""
        base = self._group(name) if name else self.root
        total, seen = 0, False
        for f in base.glob("mon_data/mon_L3_*/mbm_total_bytes"):
            try:
                total += int(f.read_text().strip())
                seen = True
            except (OSError, ValueError):
                continue  # "Unavailable" while a counter is being reset
        return total if seen else None

    def track(self, name: str, pids: Iterable[int]) -> None:
        """Create the task's mon group (if needed) and move its processes into it."""
        d = self._group(name)
        try:
            d.mkdir(exist_ok=True)
            for pid in pids:
                with open(d / "tasks", "w") as f:
                    f.write(str(pid))
        except OSError:
            pass

    def forget(self, name: str) -> None:
        for d in (self._group(name), self._ctrl(name)):
            try:
                d.rmdir()
            except OSError:
                pass

    # -- MBA: memory-bandwidth allocation -------------------------------------------------------
    def _ctrl(self, name: str) -> Path:
        return self.root / f"{self.prefix}-{name}"

    def mba_domains(self) -> list[str]:
        """L3 domains of the root schemata's `MB:` line; empty when MBA is not offered."""
        try:
            text = (self.root / "schemata").read_text()
        except OSError:
            return []
        for line in text.splitlines():
            if line.strip().startswith("MB:"):
                return [part.split("=")[0].strip() for part in line.split(":", 1)[1].split(";") if "=" in part]
        return []

    def set_mba(self, name: str, pids: Iterable[int], percent: int) -> bool:
        """Cap a task's memory bandwidth at `percent` of the link (100 = no cap) with a control group."""
        domains = self.mba_domains()
        if not domains:
            return False
        d = self._ctrl(name)
        try:
            d.mkdir(exist_ok=True)
            line = "MB:" + ";".join(f"{dom}={max(10, min(100, percent))}" for dom in domains)
            (d / "schemata").write_text(line + "\n")
            for pid in pids:
                with open(d / "tasks", "w") as f:
                    f.write(str(pid))
        except OSError:
            return False
        return True
