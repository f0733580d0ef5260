"""Points below one CPU (profiler/subcore.py, issue 14): measured after the whole-CPU search
when one CPU is already as fast as more, so that a loading-light job's profile (and so its
demand) can be a fraction of a core where the share calls for it."""
from __future__ import annotations

import multiprocessing
import time

import pytest

from synergy.profiler.fill import complete_profile
from synergy.profiler.live import SATURATED_FRACTION, LiveProfiler, Phase, ProfilingTerms, family_cpu_s, make_search
from synergy.profiler.search import OptimisticSearch
from synergy.profiler.subcore import SubCoreSearch
from synergy.scheduler.profiles.format import SensitivityProfile


def run(search, rate) -> list[tuple[float, float]]:
    while (c := search.next_cpus()) is not None:
        search.record(c, rate(c))
    return search.points


def light(c: float) -> float:
    """Needs a tenth of a core: as fast at 0.25 CPUs as at 4."""
    return 100.0 * min(1.0, c / 0.1)


def half(c: float) -> float:
    """Needs half a core."""
    return 100.0 * min(1.0, c / 0.5)


def heavy(c: float) -> float:
    """Needs two cores."""
    return 100.0 * min(1.0, c / 2.0)


def test_a_light_job_is_measured_down_to_a_quarter_core():
    points = run(SubCoreSearch(OptimisticSearch(4)), light)
    assert [c for c, _ in points][:3] == [0.25, 0.5, 1]
    entry = complete_profile(points, gpus=1, dataset_bytes=10**6, sample_bytes=1e3, storage_bytes_per_s=1e15,
                             process_mem_gb=0.5, max_mem_gb=4.0, model="light", task="image")
    prof = SensitivityProfile.from_dict("light", entry)
    assert prof.cpus_per_gpu[0] == 0.25 and prof.best_case()[0] == 0.25


def test_the_search_stops_below_where_the_job_slows_down():
    points = run(SubCoreSearch(OptimisticSearch(4)), half)
    assert [c for c, _ in points][:2] == [0.25, 0.5]  # 0.25 measured, slower: nothing below it
    points = run(SubCoreSearch(OptimisticSearch(4)), heavy)
    assert all(c >= 1 for c, _ in points)  # one CPU is slower than two: no point below it


def test_without_sub_core_the_search_is_the_whole_cpu_one():
    terms = ProfilingTerms("synergy", 4, "image", 1, 4.0)
    assert isinstance(make_search(terms), OptimisticSearch)
    assert isinstance(make_search(ProfilingTerms("synergy", 4, "image", 1, 4.0, sub_core=True)), SubCoreSearch)


def test_bad_points_are_refused():
    s = SubCoreSearch(OptimisticSearch(2))
    with pytest.raises(ValueError, match="not a point below one CPU"):
        s.record(0.3, 1.0)
    s.record(0.5, 1.0)
    with pytest.raises(ValueError, match="not a point below one CPU"):
        s.record(0.5, 1.0)
    with pytest.raises(ValueError, match="finite"):
        s.record(0.25, float("nan"))


def test_the_live_driver_waits_for_a_quarter_core_in_force():
    """The agent reports a fraction of a core as `cpus` 0.25 on one shared core."""
    terms = ProfilingTerms("synergy", 2, "image", 1, 4.0, sub_core=True)
    p = LiveProfiler(terms, samples_per_batch=10, warmup=1, measure=2)
    t = 0.0
    while not p.done:
        want = p.want
        cores = max(1, int(-(-want // 1)))
        assert p.on_batch(t, 0.0, 0) is None  # not in force yet: keep waiting
        workers = p.on_batch(t, want, cores)
        assert p.phase == Phase.MEASURE and workers == max(0, int(want) - 1)
        while p.phase == Phase.MEASURE and p.want == want:
            t += 10.0 / light(want)  # a batch of 10 samples at the light job's rate
            p.on_batch(t, want, cores)
    assert [c for c, _ in p.result()][:2] == [0.25, 0.5]


def test_no_point_is_measured_with_fewer_loader_workers_than_the_script_runs_with():
    """A job whose two workers load while its device step runs, measured with none, read the
    pace of the two in turn (20.0 and 33.3 samples/s at a quarter and half a core, batches of
    10 and a 100 ms step) and then ran 46 at half a core with its own workers. Each point now
    keeps the script's workers; above them, one core trains and the rest decode, as before."""
    terms = ProfilingTerms("synergy", 4, "image", 1, 4.0, sub_core=True)
    asked = {}
    for script_workers in (0, 2):
        p = LiveProfiler(terms, samples_per_batch=10, warmup=1, measure=2, script_workers=script_workers)
        t = 0.0
        while not p.done:
            want = p.want
            cores = max(1, int(-(-want // 1)))
            asked[(script_workers, want)] = p.on_batch(t, want, cores)
            while p.phase == Phase.MEASURE and p.want == want:
                t += 10.0 / heavy(want)
                p.on_batch(t, want, cores)
    assert asked[(0, 4)] == 3 and asked[(2, 4)] == 3  # more CPUs than the script's workers use
    below = [w for (sw, c), w in asked.items() if sw == 2 and c < 3]
    assert below and set(below) == {2}, asked
    assert {w for (sw, c), w in asked.items() if sw == 0 and c <= 1} == {0}, asked


def test_a_lease_below_one_cpu_measures_half_a_core_then_a_quarter():
    """Issue 14: four arrivals on four GPUs and two cores each get half a core (max_cpus 0):
    the search starts at what the lease holds and goes down while the job stays as fast."""
    search = make_search(ProfilingTerms("synergy", 0, "image", 1, 1.0, sub_core=True))
    assert isinstance(search, SubCoreSearch) and search.max_cpus == 0
    assert [c for c, _ in run(search, light)] == [0.25, 0.5]
    assert [c for c, _ in run(make_search(ProfilingTerms("coda", 0, "image", 1, 1.0, sub_core=True)), heavy)] == [
        0.25, 0.5]  # slower at a quarter: nothing below it (and there is nothing below it anyway)
    assert [c for c, _ in run(SubCoreSearch(None), lambda c: 100.0 * min(1.0, c / 0.4))] == [0.25, 0.5]
    with pytest.raises(ValueError, match="less than one CPU"):
        SubCoreSearch(None).record(1, 10.0)


def test_a_half_core_measured_slower_than_a_quarter_is_measured_once_more():
    """Found on the physical run: a loading-heavy job measured 16 samples/s at its half-core
    lease (just after start-up, its neighbours starting too) and 20 at a quarter core; TUNE
    then gave it a quarter, below its share. The half core is measured again, and counts."""
    search = SubCoreSearch(None)
    seen = []
    answers = {0.5: [16.0, 33.0], 0.25: [20.0]}
    while (c := search.next_cpus()) is not None:
        seen.append(c)
        search.record(c, answers[c].pop(0))
    assert seen == [0.5, 0.25, 0.5] and search.points == [(0.25, 20.0), (0.5, 33.0)] and search.probes == 3
    # A second inversion is believed (measured twice), and an honest curve is not re-checked.
    search = SubCoreSearch(None)
    answers = {0.5: [16.0, 15.0], 0.25: [20.0]}
    while (c := search.next_cpus()) is not None:
        search.record(c, answers[c].pop(0))
    assert search.points == [(0.25, 20.0), (0.5, 15.0)]
    assert [c for c, _ in run(SubCoreSearch(None), light)] == [0.25, 0.5]


def test_one_cpu_measured_slower_than_half_a_core_is_measured_once_more():
    """The dynamic physical run: a heavy job on a one-CPU lease measured 30 samples/s at one
    CPU (first, just after start-up) and 44.5 at half a core, and got half a core."""
    search = SubCoreSearch(OptimisticSearch(1))
    answers = {1: [30.0, 60.0], 0.5: [44.5], 0.25: [23.0]}
    seen = []
    while (c := search.next_cpus()) is not None:
        seen.append(c)
        search.record(c, answers[c].pop(0))
    assert seen == [1, 0.5, 0.25, 1] and search.points == [(0.25, 23.0), (0.5, 44.5), (1, 60.0)]
    entry = complete_profile(search.points, gpus=1, dataset_bytes=10**6, sample_bytes=1e3,
                             storage_bytes_per_s=1e15, process_mem_gb=0.5, max_mem_gb=4.0, model="h", task="image")
    assert SensitivityProfile.from_dict("h", entry).best_case()[0] == 1.0


def test_a_point_used_whole_ends_the_descent():
    """The physical run: each heavy job, CPU-bound on its half-core lease, spent 2-3 s more at a
    quarter core to learn it was slower there. A point whose quota the job used whole is the
    lowest measured (below its share, no point can become a demand)."""
    search = SubCoreSearch(None)
    assert search.next_cpus() == 0.5
    search.record(0.5, 46.0)
    search.saturated(0.5)
    assert search.next_cpus() is None and search.points == [(0.5, 46.0)]
    # Not saturated: the same job is measured at a quarter core, as before.
    search = SubCoreSearch(None)
    search.record(0.5, 46.0)
    assert search.next_cpus() == 0.25
    # A whole-CPU lease whose one CPU was used whole measures nothing below one CPU.
    search = SubCoreSearch(OptimisticSearch(1))
    assert search.next_cpus() == 1
    search.record(1, 90.0)
    search.saturated(1)
    assert search.next_cpus() is None


def _profile_with_cpu(uses: float) -> LiveProfiler:
    """A half-core lease driven to the end by a job that uses `uses` CPUs whatever it holds
    (capped by its quota) and runs as fast as the light job."""
    clock = {"t": 0.0, "cpu": 0.0}
    terms = ProfilingTerms("synergy", 0, "image", 1, 1.0, sub_core=True)
    p = LiveProfiler(terms, samples_per_batch=10, warmup=1, measure=4, cpu_clock=lambda: clock["cpu"])
    while not p.done:
        want = p.want
        p.on_batch(clock["t"], want, 1)
        while p.phase == Phase.MEASURE and p.want == want:
            step = 10.0 / light(want)
            clock["t"] += step
            clock["cpu"] += min(uses, want) * step
            p.on_batch(clock["t"], want, 1)
    return p


def test_the_live_driver_reads_the_cpu_a_point_used():
    bound = _profile_with_cpu(uses=1.0)  # uses whatever it is given
    assert bound.saturated == {0.5} and [c for c, _ in bound.result()] == [0.5]
    idle = _profile_with_cpu(uses=0.1)  # a tenth of a core: not CPU-bound anywhere
    assert idle.saturated == set() and [c for c, _ in idle.result()] == [0.25, 0.5]
    edge = _profile_with_cpu(uses=0.5 * SATURATED_FRACTION * 0.97)  # just below the mark at 0.5
    assert 0.5 not in edge.saturated and [c for c, _ in edge.result()] == [0.25, 0.5]


def _burn(seconds: float, burned=None, release=None) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    if burned is not None:  # stay alive (and unreaped) until the parent has read
        burned.set()
        release.wait(30)


def test_the_cpu_of_the_process_and_its_workers_is_read_from_proc():
    """Real processes: a live child that burned 0.6 s of CPU (a DataLoader worker's part) counts."""
    ctx = multiprocessing.get_context("fork")
    burned, release = ctx.Event(), ctx.Event()
    before = family_cpu_s()
    child = ctx.Process(target=_burn, args=(0.6, burned, release))
    child.start()
    try:
        assert burned.wait(60), "the child did not finish burning"
        during = family_cpu_s() - before  # the parent waited: only the child's CPU counts
    finally:
        release.set()
        child.join()
    assert during >= 0.55, f"read {during:.2f} s of CPU while a live child had burned 0.6 s"


def test_a_worker_that_exited_keeps_its_cpu_in_the_reading():
    """A worker reaped mid-window (an epoch's end) moves its time to the parent's count:
    the reading must not drop by what it used (it did before cutime was counted)."""
    before = family_cpu_s()
    child = multiprocessing.get_context("fork").Process(target=_burn, args=(0.4,))
    child.start()
    child.join()  # reaped: gone from /proc
    after = family_cpu_s() - before
    assert after >= 0.35, f"read {after:.2f} s after a reaped child burned 0.4 s"


def test_a_lease_below_one_cpu_is_described_as_such_in_the_job_log() -> None:
    # `max_cpus` 0 is a sub-core lease (job.proto): the log read "search up to 0 CPUs".
    below = ProfilingTerms("synergy", 0, "image", 1, 1.0, sub_core=True)
    assert below.describe() == "synergy search below one CPU (the lease holds less than one)"
    assert ProfilingTerms("synergy", 2, "image", 1, 4.0, sub_core=True).describe() == \
        "synergy search up to 2 CPUs, and below one CPU"
    assert ProfilingTerms("coda", 8, "image", 1, 4.0).describe() == "coda search up to 8 CPUs"
    assert ProfilingTerms("synergy", 0, "", 1, 1.0, in_force_only=True).describe() == "measure the CPUs in force"
