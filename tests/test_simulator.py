"""The trace-driven simulator: event loop, workload generator, traces and metrics.

Small clusters and a few hundred jobs keep every test well under a second or two; the
Fig. 9-sized run lives in benchmarks/sim_speed.py.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from synergy.scheduler.model import Cluster, Job
from synergy.scheduler.profiles import zoo
from synergy.scheduler.profiles.format import SensitivityProfile
from synergy.scheduler.registry import POLICIES, build_scheduler
from synergy.scheduler.simulator.engine import USAGE_CAPACITY, EngineConfig, Simulation
from synergy.scheduler.simulator.errors import SimInputError
from synergy.scheduler.simulator.experiment import RunSpec, build, prepare, simulate, zoo_profiles
from synergy.scheduler.simulator.metrics import average_utilisation, summarise
from synergy.scheduler.simulator.trace import read_trace, write_trace
from synergy.scheduler.simulator.workload import (
    WorkloadParams,
    default_measure_window,
    generate,
    parse_measure,
    parse_split,
    task_sequence,
)

#: Two DGX-like servers (16 GPUs, 3 CPUs and 62.5 GB per GPU): the paper's shape, shrunk.
SMALL = dict(servers=2, gpus_per_server=8, cpus_per_server=24.0, mem_per_server=500.0)


def flat(name: str = "flat", iter_time_s: float = 0.1, best_cpus: float = 1.0) -> SensitivityProfile:
    """Speed 1.0 from `best_cpus` CPUs/GPU up (slower below): iterations/s = 1/iter_time_s."""
    rows = (1.0, best_cpus) if best_cpus > 1.0 else (1.0, 2.0)
    low = 0.5 if best_cpus > 1.0 else 1.0
    return SensitivityProfile(name, "image", rows, (10.0, 20.0), ((low, low), (1.0, 1.0)),
                              (1.0, 10.0), iter_time_s)


def run_jobs(jobs: list[Job], cluster: Cluster, policy: str = "fifo", mechanism: str = "tune",
             memoise: bool = True, **cfg) -> object:
    return Simulation(build_scheduler(policy, mechanism), cluster, jobs, EngineConfig(memoise=memoise, **cfg)).run()


def outcome(result) -> list[tuple]:
    return [(r.id, r.first_start_s, r.completion_s) for r in sorted(result.records.values(), key=lambda r: r.id)]


# -- the event loop -----------------------------------------------------------------------------
def test_arrival_waits_for_the_next_boundary_and_completion_is_exact() -> None:
    one_gpu = Cluster.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5)
    job = Job(0, "flat", 1, arrival_s=100.0, iterations=10_000.0, profile=flat())  # 1000 s of work
    res = run_jobs([job], one_gpu)
    rec = res.records[0]
    assert rec.first_start_s == 300.0
    assert rec.completion_s == pytest.approx(1300.0)
    assert rec.jct_s == pytest.approx(1200.0)
    m = summarise(res, frozenset({0}))
    assert m["avg_queue_delay_h"] == pytest.approx(200 / 3600)


@pytest.mark.parametrize("memoise", [True, False])
def test_freed_resources_are_reused_at_the_next_boundary(memoise: bool) -> None:
    one_gpu = Cluster.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5)
    jobs = [Job(i, "flat", 1, 0.0, 10_000.0, flat()) for i in range(2)]
    res = run_jobs(jobs, one_gpu, memoise=memoise)
    assert res.records[0].completion_s == pytest.approx(1000.0)
    assert res.records[1].first_start_s == 1200.0  # job 0 ended mid-round; the GPU idles until 1200
    assert res.records[1].completion_s == pytest.approx(2200.0)


@pytest.mark.parametrize("memoise", [True, False])
def test_a_start_cost_holds_the_gpu_and_later_jobs_queue_behind_it(memoise: bool) -> None:
    """`start_cost_s`: each job makes no progress for that long after it starts, holding
    its GPU, so the second job starts a round later than without it (a JCT that only adds
    the cost after the fact would start it at 1200 s)."""
    one_gpu = Cluster.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5)
    jobs = [Job(i, "flat", 1, 0.0, 10_000.0, flat()) for i in range(2)]
    res = run_jobs(jobs, one_gpu, memoise=memoise, start_cost_s=250.0)
    assert res.records[0].completion_s == pytest.approx(1250.0)
    assert res.records[1].first_start_s == 1500.0
    assert res.records[1].completion_s == pytest.approx(2750.0)


@pytest.mark.parametrize("memoise", [True, False])
def test_every_restart_pays_the_start_cost_again(memoise: bool) -> None:
    """Under LAS two jobs alternate round by round: each restart costs the start again."""
    one_gpu = Cluster.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5)
    jobs = [Job(i, "flat", 1, 0.0, 3_000.0, flat()) for i in range(2)]  # 300 s of work each
    free = run_jobs([replace(j) for j in jobs], one_gpu, policy="las", memoise=memoise)
    costly = run_jobs(jobs, one_gpu, policy="las", memoise=memoise, start_cost_s=100.0)
    # Without a cost each finishes in its first round. With 100 s per start a round trains
    # 200 s: 0 runs [0, 300) and [600, 800), 1 runs [300, 600) and [900, 1100), each
    # paying its start twice (a cost paid once would end them at 700 and 1000).
    assert [r.completion_s for r in free.records.values()] == pytest.approx([300.0, 600.0])
    assert [r.completion_s for r in costly.records.values()] == pytest.approx([800.0, 1100.0])


@pytest.mark.parametrize("memoise", [True, False])
def test_a_job_preempted_while_starting_owes_nothing_after(memoise: bool) -> None:
    """Preempted before its start cost is paid, a job keeps no progress and owes none: it
    restarts from zero and pays the whole cost again, not the rest of the old one too."""
    one_gpu = Cluster.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5)
    long = Job(0, "flat", 1, 0.0, 10_000.0, flat())  # 1000 s of work
    short = Job(1, "flat", 1, 10.0, 1_000.0, flat())  # 100 s, arrives while the long one starts
    res = run_jobs([long, short], one_gpu, policy="srtf", memoise=memoise, start_cost_s=400.0)
    # 0 starts [0, 300) and is preempted at 300 still starting; 1 runs [300, 800); 0 restarts
    # at 900: 400 s of start, then its 1000 s (a debt carried over would end it at 2400).
    assert res.records[1].completion_s == pytest.approx(800.0)
    assert res.records[0].completion_s == pytest.approx(2300.0)


@pytest.mark.parametrize("memoise", [True, False])
def test_las_alternates_and_tracks_attained_service(memoise: bool) -> None:
    one_gpu = Cluster.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5)
    jobs = [Job(i, "flat", 1, 0.0, 10_000.0, flat()) for i in range(2)]
    res = run_jobs(jobs, one_gpu, policy="las", memoise=memoise)
    # 0 runs [0,300) [600,900) [1200,1500) [1800,1900); 1 runs the other rounds, then from 2100.
    assert res.records[0].completion_s == pytest.approx(1900.0)
    assert res.records[1].completion_s == pytest.approx(2200.0)
    assert all(j.attained_gpu_s == pytest.approx(1000.0) for j in jobs)
    assert all(j.done_iterations == j.iterations for j in jobs)


@pytest.mark.parametrize("mechanism", ["tune", "proportional"])
def test_arrivals_the_mechanism_passes_over_do_not_call_the_core(mechanism: str) -> None:
    """One GPU, busy for 3000 s: jobs 1, 2 and 3 arrive while job 0 holds it, so
    `runnable_by_gpu` passes them over and the last answer holds. The core runs at t = 0 and
    after each completion only, with the very outcome of a run calling it every round."""
    one_gpu = Cluster.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5)
    jobs = [Job(0, "flat", 1, 0.0, 30_000.0, flat())] + [
        Job(i, "flat", 1, 500.0 * i, 1_000.0, flat()) for i in (1, 2, 3)]
    fast = run_jobs(jobs, one_gpu, mechanism=mechanism)
    slow = run_jobs([replace(j, done_iterations=0.0, attained_gpu_s=0.0) for j in jobs], one_gpu,
                    mechanism=mechanism, memoise=False)
    assert outcome(fast) == outcome(slow)
    # Calls: t = 0, then one per completion (at 3000, 3300, 3600); none at the arrivals
    # (600, 1200, 1500), which the plain memo (same active set only) would all have made.
    assert fast.decisions == 4
    assert [fast.records[i].first_start_s for i in range(4)] == [0.0, 3000.0, 3300.0, 3600.0]


def test_a_runnable_arrival_calls_the_core() -> None:
    """Two GPUs, one busy: the job arriving is runnable, so the core must place it at once."""
    two_gpus = Cluster.homogeneous(1, gpus=2, cpus=6, mem_gb=125)
    jobs = [Job(0, "flat", 1, 0.0, 30_000.0, flat()), Job(1, "flat", 1, 500.0, 1_000.0, flat())]
    res = run_jobs(jobs, two_gpus)
    assert res.records[1].first_start_s == 600.0
    assert res.decisions == 3  # t = 0, the arrival, job 1's completion


def test_greedy_tries_every_queued_job_so_arrivals_always_call_the_core() -> None:
    # GREEDY may place a later job where an earlier one did not fit: no skipping for it.
    one_gpu = Cluster.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5)
    jobs = [Job(0, "flat", 1, 0.0, 30_000.0, flat()), Job(1, "flat", 1, 500.0, 1_000.0, flat())]
    assert run_jobs(jobs, one_gpu, mechanism="greedy").decisions == 3  # t = 0, the arrival, completion


def test_speed_follows_the_allocation() -> None:
    """A job given 2 CPUs/GPU by TUNE runs at its profile's speed there, not at proportional."""
    cluster = Cluster.homogeneous(1, gpus=1, cpus=2, mem_gb=20)
    slow = Job(0, "half", 1, 0.0, 10_000.0, flat("half", best_cpus=4.0))  # 2 CPUs/GPU: speed 2/3
    res = run_jobs([slow], cluster, mechanism="proportional")
    speed = slow.profile.speed(2.0, 20.0)
    assert res.records[0].completion_s == pytest.approx(10_000 * 0.1 / speed)


def test_time_limit_reports_unfinished_jobs() -> None:
    one_gpu = Cluster.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5)
    jobs = [Job(i, "flat", 1, 0.0, 100_000.0, flat()) for i in range(3)]  # 10000 s each
    res = run_jobs(jobs, one_gpu, max_time_s=12_000.0)
    assert res.stopped == "time_limit"
    assert res.unfinished == (1, 2)
    assert res.records[0].completion_s == pytest.approx(10_000.0)


def test_a_job_no_mechanism_can_place_stops_the_run_as_stalled() -> None:
    """GREEDY insists on the best case (16 CPUs/GPU) on servers with 8 CPUs: it never runs."""
    cluster = Cluster.homogeneous(2, gpus=1, cpus=8, mem_gb=62.5)
    job = Job(0, "hungry", 1, 0.0, 1000.0, flat("hungry", best_cpus=16.0))
    res = run_jobs([job], cluster, mechanism="greedy")
    assert res.stopped == "stalled" and res.unfinished == (0,)
    assert run_jobs([Job(0, "hungry", 1, 0.0, 1000.0, job.profile)], cluster).stopped == "completed"


@pytest.mark.parametrize("policy", list(POLICIES))
def test_memoisation_never_changes_the_answer(policy: str) -> None:
    """Every policy and mechanism: identical start and completion times with and without it."""
    spec = RunSpec(**SMALL, jobs=80, load=3.0, seed=3, multi_gpu=True, round_s=1800.0)
    prep = prepare(spec)
    for mechanism in ("proportional", "greedy", "tune"):
        p = replace(prep, spec=replace(spec, policy=policy, mechanism=mechanism))
        fast, slow = simulate(p), simulate(p, memoise=False)
        assert outcome(fast.result) == outcome(slow.result), mechanism
        assert fast.result.timeline == slow.result.timeline, mechanism
        assert fast.result.rounds == slow.result.rounds
        assert fast.result.decisions <= slow.result.decisions
        assert any(r.first_start_s != r.arrival_s for r in fast.result.records.values()), "no queueing"


def test_memoisation_with_opt_never_changes_the_answer() -> None:
    spec = RunSpec(**SMALL, jobs=80, load=3.0, seed=3, multi_gpu=True, round_s=1800.0, mechanism="opt")
    prep = prepare(spec)
    fast, slow = simulate(prep), simulate(prep, memoise=False)
    assert outcome(fast.result) == outcome(slow.result)
    assert fast.result.decisions < slow.result.decisions


def test_opt_placement_limit_reaches_the_mechanism() -> None:
    spec = RunSpec(**SMALL, mechanism="opt")
    assert build(spec).mechanism.placement_limit == 0.0  # the simulator's default
    assert build(replace(spec, opt_placement_limit=0.05)).mechanism.placement_limit == 0.05
    assert build(replace(spec, mechanism="tune", opt_placement_limit=0.05)) == build_scheduler("fifo", "tune")
    with pytest.raises(SimInputError, match="--opt-placement-limit"):
        prepare(replace(spec, opt_placement_limit=-1.0))


def test_same_seed_same_results_other_seed_other_results() -> None:
    spec = RunSpec(**SMALL, jobs=200, load=1.5, seed=7)
    a, b = simulate(prepare(spec)), simulate(prepare(spec))
    strip = lambda m: {k: v for k, v in m.items() if k != "wall_s"}  # noqa: E731
    assert strip(a.metrics) == strip(b.metrics)
    assert outcome(a.result) == outcome(b.result)
    c = simulate(prepare(replace(spec, seed=8)))
    assert strip(c.metrics) != strip(a.metrics)


def test_static_trace_runs_every_job_to_completion() -> None:
    spec = RunSpec(**SMALL, jobs=60, static=True, multi_gpu=True, mechanism="tune")
    prep = prepare(spec)
    assert prep.workload.static and all(j.arrival_s == 0.0 for j in prep.workload.jobs)
    report = simulate(prep)
    m = report.metrics
    assert m["stopped"] == "completed" and m["jobs_measured"] == 60 and m["jobs_unfinished"] == 0
    last = max(r.completion_s for r in report.result.records.values())
    assert m["makespan_h"] == pytest.approx(last / 3600)
    # Completions give back exactly what was taken: the step function ends at zero.
    assert report.result.timeline[-1][0] == pytest.approx(last)
    assert report.result.timeline[-1][1:] == pytest.approx((0.0,) * 5, abs=1e-6)


def test_tune_beats_proportional_on_a_loaded_cluster() -> None:
    spec = RunSpec(**SMALL, jobs=300, load=1.5, seed=0)
    prep = prepare(spec)
    prop = simulate(prep, "proportional").metrics
    tune = simulate(prep, "tune").metrics
    assert tune["avg_jct_h"] <= prop["avg_jct_h"]


def test_utilisation_is_a_fraction_and_proportional_fills_cpu_like_gpu() -> None:
    report = simulate(prepare(RunSpec(**SMALL, jobs=200, load=1.5, mechanism="proportional")))
    res = report.result
    g, c, m, c_used, m_used = average_utilisation(res, 0.0, res.end_s)
    assert 0.0 < g <= 1.0 and c == pytest.approx(g) and m == pytest.approx(g)
    # 70% language models saturate far below the proportional share: much of it sits idle.
    assert 0.0 < c_used < 0.8 * c and 0.0 < m_used < 0.8 * m
    capacity = [res.capacity[i] for i in USAGE_CAPACITY]
    for _, *vals in res.timeline:
        assert all(-1e-6 <= v / cap <= 1 + 1e-6 for v, cap in zip(vals, capacity))
        assert vals[3] <= vals[1] + 1e-6 and vals[4] <= vals[2] + 1e-6  # used <= allocated


def test_used_is_the_allocation_capped_at_saturation() -> None:
    """A job saturating at 1 CPU and 10 GB per GPU, given the proportional 3 CPUs and 62.5 GB,
    holds all of it and uses a third of the CPUs and 10 of the 62.5 GB."""
    one_gpu = Cluster.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5)
    job = Job(0, "flat", 1, arrival_s=0.0, iterations=10_000.0, profile=flat())
    assert job.profile.best_case() == (1.0, 10.0)
    res = run_jobs([job], one_gpu, mechanism="proportional")
    assert res.timeline[1:] == [(0.0, 1.0, 3.0, 62.5, 1.0, 10.0), (pytest.approx(1000.0), 0.0, 0.0, 0.0, 0.0, 0.0)]
    m = summarise(res, frozenset({0}))
    assert (m["gpu_util"], m["cpu_util"], m["mem_util"]) == pytest.approx((1.0, 1.0, 1.0))
    assert (m["cpu_used"], m["mem_used"]) == pytest.approx((1 / 3, 10 / 62.5))


# -- workloads ------------------------------------------------------------------------------------
def test_split_is_kept_exactly_and_models_rotate_within_a_task() -> None:
    tasks = task_sequence(1000, (20, 70, 10))
    assert [tasks.count(t) for t in ("image", "language", "speech")] == [200, 700, 100]
    assert [tasks[400:500].count(t) for t in ("image", "language", "speech")] == [20, 70, 10]
    cluster = Cluster.homogeneous(**{"n": 2, "gpus": 8, "cpus": 24, "mem_gb": 500})
    wl = generate(WorkloadParams(100, 5.0, (50, 0, 50)), zoo.default_profiles(), zoo.MODELS_BY_TASK,
                  cluster, np.random.default_rng(0))
    models = [j.model for j in wl.jobs]
    image = [m for m in models if m in zoo.MODELS_BY_TASK["image"]]
    assert len(image) == 50 and len(models) - len(image) == 50
    assert image[:len(zoo.MODELS_BY_TASK["image"])] == list(zoo.MODELS_BY_TASK["image"])


def test_generated_durations_match_the_paper_distribution() -> None:
    ps = zoo_profiles(None)
    cluster = Cluster.homogeneous(16, 8, 24, 500)
    wl = generate(WorkloadParams(4000, 9.0), ps.profiles, ps.models_by_task, cluster, np.random.default_rng(1))
    from synergy.scheduler.throughput import iterations_per_s, proportional_speed

    minutes = np.array([s.iterations / iterations_per_s(j, proportional_speed(j, cluster)) / 60
                        for s, j in zip(wl.jobs, wl.to_jobs(ps.profiles))])
    assert minutes.min() >= 10 ** 1.5 - 1e-6 and minutes.max() <= 10 ** 4 + 1e-6
    assert np.mean(minutes > 1000) == pytest.approx(0.2, abs=0.03)
    gaps = np.diff([s.arrival_s for s in wl.jobs])
    assert np.mean(gaps) == pytest.approx(3600 / 9, rel=0.05)


def test_multi_gpu_demands_fit_the_cluster() -> None:
    ps = zoo_profiles(None)
    small = Cluster.homogeneous(1, 8, 24, 500)
    wl = generate(WorkloadParams(500, 2.0, multi_gpu=True), ps.profiles, ps.models_by_task, small,
                  np.random.default_rng(0))
    sizes = {j.gpus for j in wl.jobs}
    assert sizes <= {1, 2, 4, 8} and {1, 8} <= sizes


def test_default_measure_window_is_the_papers_4000_to_5000_of_6000() -> None:
    assert default_measure_window(range(6000)) == frozenset(range(4000, 5000))


@pytest.mark.parametrize("text", ["20,70", "a,b,c", "20,70,20", "-10,100,10", "20;70;10"])
def test_bad_split_is_rejected(text: str) -> None:
    with pytest.raises(SimInputError, match="--split"):
        parse_split(text)


@pytest.mark.parametrize("text", ["4000", "5000:4000", "x:y", "-1:5", "3:3"])
def test_bad_measure_is_rejected(text: str) -> None:
    with pytest.raises(SimInputError, match="--measure"):
        parse_measure(text)


# -- traces ---------------------------------------------------------------------------------------
def test_record_then_replay_gives_identical_metrics(tmp_path) -> None:
    spec = RunSpec(**SMALL, jobs=150, load=1.5, seed=5, multi_gpu=True)
    prep = prepare(spec)
    path = tmp_path / "trace.csv"
    write_trace(path, prep.workload)
    replayed = prepare(replace(spec, trace=str(path)))
    assert replayed.workload == prep.workload and replayed.measured == prep.measured
    a, b = simulate(prep).metrics, simulate(replayed).metrics
    for key in ("avg_jct_h", "p99_jct_h", "makespan_h", "gpu_util", "jobs_measured", "rounds"):
        assert a[key] == b[key]


@pytest.mark.parametrize("body,needle", [
    ("0,resnet18,0,100,1\n1,resnet18,zero,100,1\n", "row 2 (line 3): field 'arrival_s'"),
    ("0,nosuchmodel,0,100,1\n", "row 1 (line 2): field 'model'"),
    ("0,resnet18,0,100,17\n", "field 'gpus' asks for 17 GPUs but the cluster has 16"),
    ("0,resnet18,0,100\n", "expected 5 fields, got 4"),
    ("0,resnet18,0,100,1\n0,resnet18,0,100,1\n", "field 'job_id' 0 repeats row 1"),
    ("0,resnet18,0,-5,1\n", "field 'iterations' must be > 0"),
])
def test_bad_trace_rows_name_file_row_and_field(tmp_path, body: str, needle: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("job_id,model,arrival_s,iterations,gpus\n" + body)
    with pytest.raises(SimInputError) as err:
        read_trace(path, zoo.default_profiles(), 16)
    assert str(path) in str(err.value) and needle in str(err.value)
