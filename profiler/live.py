"""The in-job driver of a profiling lease: one search, one window per point, one profile.

`SynergyIterator` builds a `LiveProfiler` when its lease reply carries a `ProfilingLease`
(docs/daemon.md "Profiling lease") and calls `on_batch` once per training iteration. The
driver walks through the points the search chooses (`OptimisticSearch`, or `CodaSearch` for
`profiler: coda`):

1. **ask**: `want` is the CPU count of the next point; the iterator's lease thread sends it
   as `RenewLeaseRequest.profile_cpus`, the daemon changes the placement and the agent
   RESIZEs the task's cpuset;
2. **wait** until the reply's `in_force` allocation shows that many CPUs (and cores), then
   tell the iterator to switch the DataLoader to `workers_for(cpus)` workers, never fewer than
   the script's own (a new loader iterator at the current position);
3. **measure** a `ThroughputWindow` of real iterations (warm-up excluded: new workers start
   and fill their queues), record the point, and go back to 1 until the search is done.
   With a `cpu_clock` (the CPU seconds of the process and its workers: `family_cpu_s`) the
   window also reads how much CPU the job used; a point at which it used its whole quota
   (`SATURATED_FRACTION`) is CPU-bound, and a search that can use that (`saturated`:
   subcore.py) measures nothing below it. `saturated` lists those points for the caller
   (refine.optimistic_points extrapolates from one of them).

Then `result()` is ready: the measured points, which the caller completes into a profile
(`build_profile`: the storage bandwidth of the files read through the job's MinIO cache, found
by `synergy.cache.find_caches`, or memory treated as insensitive, and `complete_profile`'s
MinIO fill) and reports.

Pure apart from `build_profile`, `process_rss_gb` and `family_cpu_s` (which read files): the
clocks are passed in, so tests drive it without time.
"""

from __future__ import annotations

import enum
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from synergy.profiler.coda import CodaSearch
from synergy.profiler.fill import complete_profile
from synergy.profiler.refine import flatten_noise
from synergy.profiler.search import OptimisticSearch
from synergy.profiler.storage import measure_read_bandwidth
from synergy.profiler.subcore import SubCoreSearch
from synergy.profiler.window import MIN_WINDOW_S, ThroughputWindow

#: Iterations per window: skipped after a switch, then timed (for at least `MIN_WINDOW_S`).
#: Small: every point is real training, and a profile should take well under a minute
#: (issue 8's target).
WARMUP_ITERATIONS = 3
MEASURE_ITERATIONS = 8
#: Storage read budget of the bandwidth measurement, seconds.
STORAGE_BUDGET_S = 2.0
#: The process memory the profile reserves, over the RSS measured once: peaks (a new
#: epoch's workers, checkpoint buffers) and allocator slack come on top of a snapshot.
PROCESS_HEADROOM = 1.5
#: A point at which the job's processes used at least this share of its CPUs is CPU-bound
#: (CFS quota: a job throttled in its periods reads about 0.95-1.0; a loading-light one 0.2-0.4).
SATURATED_FRACTION = 0.85
#: "Infinite" storage bandwidth (bytes/s) for a job whose reads do not go through a cache:
#: the MinIO fill then makes every memory size as fast as full memory (insensitive).
INSENSITIVE_STORAGE_BYTES_PER_S = 1e15


def workers_for(cpus: float, script_workers: int = 0) -> int:
    """DataLoader workers at `cpus` CPUs: one core for the training process, the rest decode
    (0 at 1 CPU or below: the training process loads its own batches), and never fewer than
    the `script_workers` the job's own loader has.

    The job runs with its script's workers once profiled, so a point measured with fewer
    measures another pipeline: with none, loading and the device step take turns, and a job
    whose workers load while the step runs reads the pace of the two in turn. On the physical
    run (batches of 10, a 100 ms step, two workers) every loading-heavy job read exactly that,
    20.0 and 33.3 samples/s at a quarter and half a core, and ran 46 at half a core.
    """
    return max(script_workers, int(cpus) - 1)


@dataclass(frozen=True)
class ProfilingTerms:
    """A profiling lease's terms (`ProfilingLease` in job.proto)."""

    search: str
    max_cpus: int
    task: str
    gpus: int
    max_mem_gb: float
    #: Measure points below one CPU too (`ProfilingLease.sub_core`, profiler/subcore.py).
    sub_core: bool = False
    #: No points to ask for (Slurm): measure the CPUs the process runs on (`ProfilingLease.in_force_only`).
    in_force_only: bool = False

    def describe(self) -> str:
        """The terms in words, for the job's log (a `max_cpus` of 0 is a lease below one CPU)."""
        if self.in_force_only:
            return "measure the CPUs in force"
        if self.max_cpus == 0:
            return f"{self.search} search below one CPU (the lease holds less than one)"
        return f"{self.search} search up to {self.max_cpus} CPUs" + (", and below one CPU" if self.sub_core else "")


class Phase(str, enum.Enum):
    WAIT = "wait"          # asked for `want` CPUs; waiting for the agent to apply them
    MEASURE = "measure"    # the loader runs at `want` CPUs; the window is filling
    DONE = "done"          # the search ended: `result()` holds the points


def make_search(terms: ProfilingTerms) -> Any:
    """The search a lease asks for: `CodaSearch` for "coda", else Synergy's optimistic one;
    on a lease below one CPU (`max_cpus` 0) only the points below one CPU."""
    if terms.max_cpus < 1:
        return SubCoreSearch(None)
    search: Any = CodaSearch(terms.max_cpus, terms.task or "image") if terms.search == "coda" \
        else OptimisticSearch(terms.max_cpus)
    return SubCoreSearch(search) if terms.sub_core else search


class LiveProfiler:
    """One profiling lease's state machine; see the module docstring."""

    def __init__(self, terms: ProfilingTerms, samples_per_batch: int, search: Any = None,
                 warmup: int = WARMUP_ITERATIONS, measure: int = MEASURE_ITERATIONS,
                 cpu_clock: Callable[[], float] | None = None, min_s: float = MIN_WINDOW_S,
                 script_workers: int = 0) -> None:
        self.terms = terms
        #: The job's own DataLoader workers: no point is measured with fewer (`workers_for`).
        self.script_workers = script_workers
        self.samples_per_batch = samples_per_batch
        self.search = search if search is not None else make_search(terms)
        self.warmup, self.measure, self.min_s = warmup, measure, min_s
        self.want: float = 0
        self.window: ThroughputWindow | None = None
        self.phase = Phase.WAIT
        #: CPU seconds of the job's processes (None: not read; no point is called saturated).
        self.cpu_clock = cpu_clock
        self._cpu_start = 0.0
        #: Points (CPUs) at which the job used its whole quota over the window.
        self.saturated: set[float] = set()
        self._next()

    def _next(self) -> None:
        nxt = self.search.next_cpus()
        if nxt is None:
            self.phase, self.want, self.window = Phase.DONE, 0, None
        else:
            self.phase, self.want, self.window = Phase.WAIT, nxt, None

    @property
    def done(self) -> bool:
        return self.phase == Phase.DONE

    def on_batch(self, now_s: float, in_force_cpus: float, in_force_cores: int) -> int | None:
        """An iteration ended at `now_s`; the allocation in force is as given (0 = unknown).

        Returns the worker count to switch the loader to now, or None to keep it.
        """
        if self.phase == Phase.WAIT:
            if abs(in_force_cpus - self.want) < 1e-9 and in_force_cores >= math.ceil(self.want):
                self.phase = Phase.MEASURE
                self.window = ThroughputWindow(self.warmup, self.measure, self.min_s)
                return workers_for(self.want, self.script_workers)
            return None
        if self.phase == Phase.MEASURE:
            window = self.window
            assert window is not None
            started = window.started
            window.tick(now_s, self.samples_per_batch)
            if self.cpu_clock is not None and not started and window.started:
                self._cpu_start = self.cpu_clock()
            if window.done:
                self.search.record(self.want, window.samples_per_s)
                if self.cpu_clock is not None and window.elapsed_s > 0 and (
                        self.cpu_clock() - self._cpu_start >= SATURATED_FRACTION * self.want * window.elapsed_s):
                    self.saturated.add(self.want)
                    note = getattr(self.search, "saturated", None)
                    if note is not None:
                        note(self.want)
                self._next()
        return None

    def result(self) -> list[tuple[float, float]]:
        """The measured (CPUs, samples/s) points."""
        return list(self.search.points)


def _family(pid: int | None) -> Iterator[tuple[Path, list[str]]]:
    """(/proc entry, its stat fields after the command name) of a process and its direct
    children (DataLoader workers); a process that went away meanwhile is left out."""
    pid = os.getpid() if pid is None else pid
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(entry.name) == pid or int(fields[1]) == pid:
                yield entry, fields
        except (OSError, ValueError, IndexError):
            continue


def process_rss_gb(pid: int | None = None) -> float:
    """Resident memory of a process and its direct children (DataLoader workers), GB."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for entry, _ in _family(pid):
        try:
            total += int((entry / "statm").read_text().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue  # the process went away meanwhile
    return total / 1e9


def family_cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system, every thread) a process and its direct children used so
    far: what a profiling window reads to tell a CPU-bound point (`SATURATED_FRACTION`).

    The process's own count includes the children it has reaped (cutime, cstime): a DataLoader
    worker that exits mid-window (the end of an epoch) moves its time there instead of losing
    it, so the reading never goes back.
    """
    root = os.getpid() if pid is None else pid
    tick = os.sysconf("SC_CLK_TCK")
    ticks = 0
    for entry, f in _family(root):
        ticks += int(f[11]) + int(f[12])
        if entry.name == str(root):
            ticks += int(f[13]) + int(f[14])
    return ticks / tick


def build_profile(points: Sequence[tuple[float, float]], terms: ProfilingTerms, *, model: str,
                  files: Sequence[Path] | None, batch_size: int, process_mem_gb: float) -> dict[str, Any]:
    """The whole profile (docs/profiles.md, one model entry) from the measured points.

    With `files` (the dataset's, read through a MinIO cache) the storage bandwidth is measured
    on them and the memory axis follows the MinIO model; without, memory is insensitive.
    """
    if files:  # memory-sensitive: the MinIO model over the measured storage bandwidth
        sizes = [f.stat().st_size for f in files]
        dataset_bytes = max(1, sum(sizes))
        sample_bytes = max(1.0, dataset_bytes / len(sizes))
        storage = measure_read_bandwidth(files, STORAGE_BUDGET_S)
    # The fill needs some memory that is not cache; a process above its allocation (memory
    # not enforced) is capped so the model still has a cache axis to describe.
    process = min(max(process_mem_gb * PROCESS_HEADROOM, 1e-3), terms.max_mem_gb * 0.9)
    if not files:
        # No cache: a nominal dataset filling half the cache room, read at "infinite" speed,
        # makes every memory column as fast as full memory (the grid needs distinct columns).
        dataset_bytes = max(1000, int((terms.max_mem_gb - process) * 0.5 * 1e9))
        sample_bytes, storage = dataset_bytes / 1000, INSENSITIVE_STORAGE_BYTES_PER_S
    return complete_profile(
        flatten_noise(points),
        gpus=max(1, terms.gpus),
        dataset_bytes=dataset_bytes,
        sample_bytes=sample_bytes,
        storage_bytes_per_s=storage,
        process_mem_gb=process,
        max_mem_gb=terms.max_mem_gb,
        model=model,
        task=terms.task or "image",
        batch_size=max(1, batch_size // max(1, terms.gpus)),
    )
