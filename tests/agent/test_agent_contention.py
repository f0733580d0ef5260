"""CODA's contention eliminator: the pure decision exhaustively, the actuators for real (cgroup v1) and on a fake resctrl."""

from __future__ import annotations

import itertools
import statistics
import logging
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from synergy.agent.bandwidth import SOURCE_ESTIMATE, SOURCE_MBM, Bandwidth, Calibration, Resctrl
from synergy.agent.cgroups import detect
from synergy.agent.contention import (BASELINE_MIN, Observation, Policy, State, Throughput, decide, degraded,
                                      uncontended)
from synergy.agent.eliminator import Eliminator
from synergy.agent.tasks import Phase, Supervisor
from synergy.agent.telemetry import NodeSample, Sampler, TaskSample
from synergyd_harness import wait_for
from synergy.v1 import common_pb2, node_pb2

P = Policy()  # 75 % threshold, 10 % drop, restore below 60 %, 3 calm samples, cooldown 2, max level 3,
# 2 slow samples, CPU-only tasks below 5 % of the peak never throttled
PEAK = 100.0
SLOW = {"gpu": (80.0, 100.0)}  # 20 % below baseline
FINE = {"gpu": (95.0, 100.0)}


def obs(bw: float, cpu: dict[str, float] | None = None, training: dict | None = None) -> Observation:
    return Observation(bw, PEAK, {"a": 30.0, "b": 50.0} if cpu is None else cpu, SLOW if training is None else training)


def run(state: State, *observations: Observation) -> tuple[State, list]:
    actions = []
    for o in observations:
        state, acts = decide(state, o, P)
        actions.extend(acts)
    return state, actions


def test_throttles_the_heaviest_cpu_task_only_when_bandwidth_and_training_both_say_so() -> None:
    slowed = State(slow=P.slow_samples - 1)  # training already slow on the previous observation
    assert decide(slowed, obs(80, training=FINE), P) == (State(), [])  # bandwidth high, training fine
    assert decide(slowed, obs(70), P)[1] == []  # training slow, bandwidth below the threshold
    assert decide(slowed, obs(80, training={"gpu": (10.0, 0.0)}), P)[1] == []  # no baseline yet
    assert decide(slowed, Observation(80, 0, {"a": 1}, SLOW), P)[1] == []  # no calibrated peak
    assert decide(slowed, obs(80, cpu={}), P)[1] == []  # nothing to throttle
    state, [a] = decide(slowed, obs(75), P)  # exactly at the threshold counts
    assert (a.kind, a.task, a.level) == ("throttle", "b", 1) and "75% of peak" in a.reason
    assert "uses the most (0.00 GB/s)" in a.reason  # 50 B/s in the test's units
    assert state.levels == {"b": 1} and state.cooldown == P.cooldown_samples and state.slow == 0


def test_one_slow_sample_is_noise_not_a_slowdown() -> None:
    """Old behaviour: the first observation with training below its baseline throttled."""
    state, actions = decide(State(), obs(90), P)
    assert actions == [] and state.slow == 1
    assert decide(state, obs(90, training=FINE), P)[0].slow == 0  # a fine sample breaks the streak
    state, [a] = decide(state, obs(90), P)  # the second in a row acts
    assert a.kind == "throttle" and f"for {P.slow_samples} samples" in a.reason


def test_a_cpu_task_without_measured_bandwidth_is_never_the_one_throttled() -> None:
    """Old behaviour: a contender's first sample (no rate yet, 0 B/s) made it "the heaviest" at once."""
    slowed = State(slow=5)
    assert decide(slowed, obs(100, cpu={"new": 0.0}), P)[1] == []
    assert decide(slowed, obs(100, cpu={"idle": 0.04 * PEAK}), P)[1] == []  # below 5 % of the peak
    _, [a] = decide(slowed, obs(100, cpu={"new": 0.0, "idle": 0.04 * PEAK, "heavy": 0.3 * PEAK}), P)
    assert a.task == "heavy"
    _, [a] = decide(slowed, obs(100, cpu={"x": 0.05 * PEAK}), P)  # exactly at the floor counts
    assert a.task == "x"


def test_cooldown_then_step_by_step_throttling_up_to_the_max_level() -> None:
    state, actions = run(State(), *[obs(90)] * (P.slow_samples + P.cooldown_samples))
    assert [(a.task, a.level) for a in actions] == [("b", 1)]  # the cooldown held the next two
    assert state.slow == P.cooldown_samples  # slow samples during the cooldown count towards the next step
    state, actions = run(state, *[obs(90)] * 20)
    # b is the heaviest until it reaches the max level; then a
    assert [(a.task, a.level) for a in actions] == [("b", 2), ("b", 3), ("a", 1), ("a", 2), ("a", 3)]
    assert state.levels == {"a": 3, "b": 3}
    assert run(state, *[obs(90)] * 5)[1] == []  # everything at the max: nothing more to do


def test_restore_needs_calm_samples_below_the_hysteresis_band_one_step_at_a_time() -> None:
    state = State(levels={"a": 1, "b": 2})
    # in the band (60 % <= bw < 75 %): hold, and the calm count restarts
    state, actions = run(state, obs(50, training=FINE), obs(50, training=FINE), obs(65, training=FINE))
    assert actions == [] and state.calm == 0
    # training still slow while bandwidth is low: hold
    assert run(state, *[obs(10)] * 5)[1] == []
    state, actions = run(state, *[obs(10, training=FINE)] * P.calm_samples)
    assert [(a.kind, a.task, a.level) for a in actions] == [("restore", "b", 1)]  # most throttled first
    state, actions = run(state, *[obs(10, training=FINE)] * 30)
    assert [(a.task, a.level) for a in actions] == [("b", 0), ("a", 0)]  # ties: the larger key first
    assert state.levels == {} and run(state, *[obs(10, training=FINE)] * 5)[1] == []


def test_tasks_that_left_drop_out_and_ties_are_deterministic() -> None:
    state, _ = decide(State(levels={"gone": 2, "a": 1}), obs(10, cpu={"a": 1.0}, training=FINE), P)
    assert state.levels == {"a": 1}
    _, [a] = decide(State(slow=1), obs(90, cpu={"x": 5.0, "y": 5.0}), P)
    assert a.task == "y"  # equal bandwidth: the larger key, always the same


def test_invariants_over_a_grid_of_situations() -> None:
    """Never throttle without both signals (held for `slow_samples`) or a task with measured bandwidth,
    never restore with either, levels stay within bounds."""
    bws = [0, 30, 59.9, 60, 70, 74.9, 75, 90, 100, 150]
    trainings = [{}, FINE, SLOW, {"gpu": (80.0, 0.0)}, {"g1": (95.0, 100.0), "g2": (50.0, 100.0)}]
    levels = [{}, {"a": 1}, {"a": 3, "b": 3}, {"b": 2}]
    cpus = [{"a": 30.0, "b": 50.0}, {"a": 0.0, "b": 4.0}, {"a": 0.0, "b": 50.0}]
    for bw, training, lv, cpu, calm, cooldown, slow_before in itertools.product(
            bws, trainings, levels, cpus, (0, 2), (0, 1), (0, 1, 4)):
        o = obs(bw, cpu=cpu, training=training)
        state, actions = decide(State(dict(lv), calm, cooldown, slow_before), o, P)
        slow = bool(degraded(training, P.throughput_drop))
        assert len(actions) <= 1
        assert all(0 <= v <= P.max_level for v in state.levels.values())
        assert state.slow == (0 if actions or not slow else slow_before + 1)
        for a in actions:
            assert cooldown == 0
            if a.kind == "throttle":
                assert bw >= 75 and slow and slow_before + 1 >= P.slow_samples and a.level == lv.get(a.task, 0) + 1
                assert cpu[a.task] >= P.min_task_share * PEAK
            else:
                assert bw < 60 and not slow and calm + 1 >= P.calm_samples and a.level == lv[a.task] - 1
        heavy = [k for k, v in cpu.items() if v >= P.min_task_share * PEAK]
        if not actions and cooldown == 0 and bw >= 75 and slow and slow_before + 1 >= P.slow_samples:
            assert all(lv.get(k, 0) == P.max_level for k in heavy)


def test_throughput_prefers_reports_and_learns_baselines_only_when_uncontended() -> None:
    t = Throughput()
    assert t.observe({"g": 90.0}, uncontended=True) == {"g": (90.0, 90.0)}
    assert t.observe({"g": 70.0}, uncontended=True) == {"g": (70.0, 80.0)}
    assert t.observe({"g": 10.0}, uncontended=False) == {"g": (10.0, 80.0)}  # contended: baseline kept
    t.report("g", 400.0)  # the job's own samples/s win over GPU utilisation (and start a new window)
    assert t.observe({"g": 10.0}, uncontended=True)["g"] == (400.0, 400.0)
    assert t.observe({}, uncontended=True) == {} and not t.reported


def test_the_learnt_uncontended_median_replaces_the_daemons_best_ever_baseline() -> None:
    """Old behaviour: the daemon's baseline (the best value ever seen, noise included) was used as is,
    so a job running at its normal speed looked 5-10 % slow."""
    t = Throughput()
    noisy = [100.0, 104.0, 97.0, 101.0, 99.0, 103.0, 96.0]
    for i, v in enumerate(noisy):
        t.report("g", v, baseline=max(noisy[: i + 1]))
        now, base = t.observe({"g": 0.0}, uncontended=True)["g"]
        assert base == (max(noisy[: i + 1]) if i + 1 < BASELINE_MIN else statistics.median(noisy[: i + 1]))
    assert base == 100.0 and not degraded({"g": (96.0, base)}, 0.05)
    assert degraded({"g": (96.0, max(noisy))}, 0.05)  # the best-ever baseline calls a normal 96 slow
    for _ in range(10):  # contention (or a held contender) never teaches the baseline
        t.report("g", 50.0, baseline=104.0)
        assert t.observe({"g": 0.0}, uncontended=False)["g"] == (50.0, 100.0)
    t.report("g", 200.0, baseline=200.0)  # a resize: a new allocation has a new normal speed
    assert t.observe({"g": 0.0}, uncontended=True, allocs={"g": "2 cpus"})["g"] == (200.0, 200.0)


def test_uncontended_means_nothing_but_training_uses_bandwidth_and_nothing_is_held() -> None:
    assert uncontended(0.59 * PEAK, PEAK, False, P)
    assert not uncontended(0.6 * PEAK, PEAK, False, P)  # a contender (or another tenant) streams
    assert not uncontended(0.0, PEAK, True, P)  # a held contender is hidden contention
    assert not uncontended(0.0, 0.0, False, P)  # no calibrated peak: nothing to compare with


def test_resctrl_mba_caps_a_task_on_a_fake_tree(tmp_path: Path) -> None:
    root = tmp_path / "resctrl"
    root.mkdir()
    (root / "schemata").write_text("L3:0=fff;1=fff\n    MB:0=100;1=100\n")
    r = Resctrl(root)
    assert r.mba_domains() == ["0", "1"]
    assert r.set_mba("job1-a1-r0", [123], 50)
    g = root / "synergy-job1-a1-r0"
    assert (g / "schemata").read_text() == "MB:0=50;1=50\n" and (g / "tasks").read_text() == "123"
    assert r.set_mba("job1-a1-r0", [123], 3) and "MB:0=10;1=10" in (g / "schemata").read_text()  # floor 10 %
    assert not Resctrl(tmp_path / "none").set_mba("x", [1], 50)


CORES = tuple(sorted(os.sched_getaffinity(0)))
BURN = ("import os; print('PID', os.getpid(), flush=True)\n"
        "from synergy.common.startup import reached_training_loop; reached_training_loop()\nwhile True: pass")
SLEEP = "import time; time.sleep(600)"


def _spec(job: int, code: str, gpus: int) -> node_pb2.TaskSpec:
    return node_pb2.TaskSpec(
        ref=node_pb2.TaskRef(job_id=job, attempt=1, rank=0), job_name=f"j{job}", world_size=1,
        command=[sys.executable, "-c", code],
        placement=common_pb2.Placement(node_id="n", gpus=gpus, cpus=1, mem_gb=0.25), job_token="t" * 20,
    )


def _sample(real: NodeSample, node_bw: float, gpu_util: float) -> NodeSample:
    """The real sample, with the node's bandwidth and the training task's GPU use set by the test."""
    tasks = {k: (t if k != "2-1-0" else TaskSample(**{**t.__dict__, "gpu_util_pct": gpu_util}))
             for k, t in real.tasks.items()}
    return NodeSample(**{**real.__dict__, "membw": Bandwidth(node_bw, SOURCE_ESTIMATE), "tasks": tasks})


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")
def test_quota_actuator_halves_a_burning_cpu_job_and_restores_it(tmp_path: Path) -> None:
    cg = detect(f"synergy-test/{uuid.uuid4().hex[:8]}", CORES)
    if cg.kind != "v1":
        pytest.skip(f"needs root and cgroup v1 (CI runs as root); here: {cg.describe()}")
    sup = Supervisor(node_id="n", cores=CORES, gpus=1, mem_gb=2, work_dir=tmp_path, cgroups=cg,
                     log=logging.getLogger("test-agent"), daemon_address="127.0.0.1:1")
    sampler = Sampler(CORES, cg, calibration=Calibration(PEAK, 10.0, CORES, 0.1))
    elim = Eliminator(sup, logging.getLogger("test-agent"), Policy(calm_samples=2, cooldown_samples=0))
    try:
        burn, train = sup.launch(_spec(1, BURN, 0)), sup.launch(_spec(2, SLEEP, 1))
        assert burn.phase == train.phase == Phase.RUNNING
        quota = cg._dir("cpu", burn.cgroup) / "cpu.cfs_quota_us"
        wait_for(lambda: (sup.poll(), burn.startup is None)[1], timeout=30, what="the start-up phase to end")
        assert quota.read_text().strip() == "100000"

        def spaced() -> NodeSample:
            """A sample 0.3 s after the previous one: CPU rates over a few milliseconds are tick noise."""
            end = time.monotonic() + 0.3
            wait_for(lambda: time.monotonic() >= end, timeout=30, interval=0.05)
            return sampler.sample(sup.tasks.values())

        def cpu_after(window_s: float = 1.0) -> float:
            sampler.sample(sup.tasks.values())
            end = time.monotonic() + window_s
            wait_for(lambda: time.monotonic() >= end, timeout=30, interval=0.05)
            return sampler.sample(sup.tasks.values()).tasks["1-1-0"].cpu_cores

        before = cpu_after()
        for _ in range(3):  # the training task's baseline, learnt while uncontended
            assert elim.step(_sample(spaced(), 20, 90)) == []
        assert elim.step(_sample(spaced(), 90, 50)) == []  # one slow sample: noise
        [a] = elim.step(_sample(spaced(), 90, 50))  # contention, training slowed
        assert (a.kind, a.task, a.level) == ("throttle", "1-1-0", 1)
        assert quota.read_text().strip() == "50000" and burn.throttle_level == 1
        during = cpu_after()
        assert during < 0.65, (before, during)  # held to half a core (plus tick noise)
        assert elim.counts["throttle"] == 1
        actions = [x for _ in range(2) for x in elim.step(_sample(sampler.sample(sup.tasks.values()), 10, 90))]
        assert [(x.kind, x.level) for x in actions] == [("restore", 0)]
        assert quota.read_text().strip() == "100000" and burn.throttle_level == 0
        print(f"burner CPU: before {before:.2f}, throttled {during:.2f} cores")
    finally:
        sup.shutdown(0)
        cg.teardown()


def _task(key: str, cpu: float, bw: float) -> TaskSample:
    return TaskSample(key=key, at_unix=0.0, cpu_cores=cpu, rss_bytes=0, memory_bytes=0, page_faults_per_s=0.0,
                      major_faults_per_s=0.0, read_bytes_per_s=0.0, write_bytes_per_s=0.0,
                      membw=Bandwidth(bw, SOURCE_ESTIMATE))


def test_others_bandwidth_is_every_busy_core_but_trainings_at_the_calibrated_rate() -> None:
    """The estimate caps the node at the peak, so node minus training would hide a contender: with one
    core per task at 60 B/s each and a peak of 100, the node reads 100 and 'others' would be 40."""
    cal = Calibration(PEAK, 60.0, CORES, 0.1)
    elim = Eliminator(None, logging.getLogger("test-agent"), P, calibration=cal)  # type: ignore[arg-type]
    tasks = {"train": _task("train", 1.0, 60.0), "cpu": _task("cpu", 1.0, 60.0)}
    node = NodeSample(at_unix=0.0, cpu_util_pct=100.0, cpu_cores_busy=2.1, mem_used_bytes=0, mem_total_bytes=1,
                      membw=Bandwidth(PEAK, SOURCE_ESTIMATE), membw_peak=Bandwidth(PEAK, "copy-benchmark"),
                      tasks=tasks)
    assert elim.others_bw(node, {"train"}) == 66.0  # 1.1 cores (the contender, the agent) x 60
    assert not uncontended(elim.others_bw(node, {"train"}), PEAK, False, P)
    alone = NodeSample(**{**node.__dict__, "cpu_cores_busy": 1.1, "tasks": {"train": tasks["train"]}})
    assert abs(elim.others_bw(alone, {"train"}) - 6.0) < 1e-9 and uncontended(6.0, PEAK, False, P)
    measured = NodeSample(**{**node.__dict__, "membw": Bandwidth(90.0, SOURCE_MBM)})  # resctrl: node less training
    assert elim.others_bw(measured, {"train"}) == 30.0
