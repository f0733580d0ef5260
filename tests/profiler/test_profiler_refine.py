"""Above the lease and after it (profiler/refine.py, issue 14): an optimistic row where the job
still climbs at the top of its lease, then points measured at each new allocation in force."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from synergy.profiler.refine import Refiner, StepCeiling, flatten_noise, optimistic_points


def test_a_job_still_climbing_at_the_top_gets_one_optimistic_row():
    points, guess = optimistic_points([(0.25, 50.0), (0.5, 100.0)])
    assert guess == 1.0 and points[-1] == (1.0, 200.0)  # on the line through the top two
    assert optimistic_points([(0.25, 99.0), (0.5, 100.0)]) == ([(0.25, 99.0), (0.5, 100.0)], None)  # flat: none
    assert optimistic_points([(1, 100.0)]) == ([(1, 100.0)], None)


def test_a_lone_cpu_bound_point_climbs_on_the_line_through_the_origin():
    """A sub-core lease that found its half core used whole measures nothing below it
    (subcore.py): the one point is still the job's profile, and more CPU is what it waits for."""
    assert optimistic_points([(0.5, 46.0)], saturated={0.5}) == ([(0.5, 46.0), (1.0, 92.0)], 1.0)
    assert optimistic_points([(0.5, 46.0)], saturated={0.25}) == ([(0.5, 46.0)], None)  # another point's
    # With a point below, the measured line decides, saturated or not.
    assert optimistic_points([(0.25, 45.0), (0.5, 46.0)], saturated={0.5}) == ([(0.25, 45.0), (0.5, 46.0)], None)


def test_the_guess_never_climbs_faster_than_its_cpus():
    """A loading-heavy job read 40.2, 50.2 and 88.0 samples/s at 0.5, 0.75 and 1 CPU beside
    starting arrivals (the middle point low): the line through the top two put 2 CPUs at 239.
    A concave curve through the origin gains at most in proportion to its CPUs: 176."""
    points, guess = optimistic_points([(0.5, 40.2), (0.75, 50.2), (1.0, 88.0)])
    assert guess == 2.0 and points[-1] == (2.0, 176.0)


def test_the_device_time_of_a_step_caps_the_guess():
    assert optimistic_points([(0.5, 40.0), (1.0, 88.0)], ceiling=100.0)[0][-1] == (2.0, 100.0)
    assert optimistic_points([(0.5, 46.0)], saturated={0.5}, ceiling=60.0) == ([(0.5, 46.0), (1.0, 60.0)], 1.0)
    # A top point already at the ceiling has nothing above it.
    assert optimistic_points([(0.5, 40.0), (1.0, 88.0)], ceiling=88.0) == ([(0.5, 40.0), (1.0, 88.0)], None)


def test_the_step_ceiling_is_the_device_time_of_the_quick_steps():
    c = StepCeiling(samples_per_batch=4)
    for _ in range(StepCeiling.MIN_STEPS - 1):
        c.add(0.045, 0.005)
    assert c.samples_per_s is None  # too few steps to say
    c.add(0.045, 0.005)
    assert abs(c.samples_per_s - 100.0) < 1e-9  # 40 ms of each step off the CPU: 4 / 0.04
    for _ in range(5):  # a few steps stalled by a throttled quota do not lower the bound
        c.add(0.5, 0.005)
    assert abs(c.samples_per_s - 100.0) < 1e-9
    cpu = StepCeiling(samples_per_batch=4)
    for _ in range(20):  # a CPU step (a CPU model, a spin-wait) shows no device time: no ceiling
        cpu.add(0.05, 0.06)
    assert cpu.samples_per_s is None


@given(st.lists(st.tuples(st.sampled_from([0.25, 0.5, 1, 2, 3, 4, 6, 8]), st.floats(0.1, 1e4)), min_size=1,
                max_size=8, unique_by=lambda p: p[0]),
       st.one_of(st.none(), st.floats(0.1, 1e4)), st.sets(st.sampled_from([0.25, 0.5, 1, 2])))
def test_the_guess_lies_above_the_top_and_within_its_bounds(points, ceiling, saturated):
    out, guess = optimistic_points(points, ceiling=ceiling, saturated=saturated)
    assert out[:len(points)] == sorted(points)
    top_c, top_t = max(points)
    if guess is not None:
        assert guess == 2 * top_c and top_t < out[-1][1] <= 2 * top_t
        assert ceiling is None or out[-1][1] <= ceiling
    else:
        assert out == sorted(points)


def _feed(r: Refiner, cpus: float, n: int, step_s: float, t: float) -> tuple[float, int]:
    reports = 0
    for _ in range(n):
        t += step_s
        reports += r.on_batch(t, cpus)
    return t, reports


def test_a_new_allocation_in_force_is_measured_once_and_reported():
    r = Refiner([(0.25, 50.0), (0.5, 100.0), (1.0, 200.0)], samples_per_batch=4, guessed=1.0)
    t, reports = _feed(r, 0.5, 30, 0.04, 0.0)  # measured already: nothing to do
    assert reports == 0
    t, reports = _feed(r, 1.0, 30, 0.05, t)  # the guess, given by a round: measured
    assert reports == 1 and abs(dict(r.points)[1.0] - 4 / 0.05) < 1e-6 and len(r.points) == 3
    t, reports = _feed(r, 1.0, 30, 0.05, t)
    assert reports == 0  # once
    _, reports = _feed(r, 0.0, 30, 0.05, t)  # unknown allocation: nothing
    assert reports == 0


def test_a_point_the_job_does_not_sustain_is_lowered():
    """The physical run: loading-light jobs measured full speed at a quarter core in a
    one-second window (91 samples/s), then ran there 10% slower for minutes beside busy heavy
    jobs that came later. Held at a measured point for SUSTAIN_S, window after window below
    the top point, the job reports what it sustained."""
    r = Refiner([(0.25, 91.0), (0.5, 91.0)], samples_per_batch=4, sustain_s=15.0)
    t, reports = _feed(r, 0.25, 200, 0.0445, 0.0)  # 8.9 s: not yet
    assert reports == 0
    t, reports = _feed(r, 0.25, 400, 0.0445, t)  # 89.9 samples/s: within the noise, kept
    assert reports == 0 and dict(r.points)[0.25] == 91.0
    t, reports = _feed(r, 0.25, 800, 0.05, t)  # then a busy neighbour: 80 samples/s
    assert reports == 1 and abs(dict(r.points)[0.25] - 80.0) < 0.5 and dict(r.points)[0.5] == 91.0
    # Lowered, the quarter core is no longer the light job's best case: its share is.
    assert [c for c, _ in flatten_noise(r.points)] == [0.25, 0.5] and flatten_noise(r.points)[1][1] == 91.0


def test_the_top_point_is_held_once():
    r = Refiner([(0.25, 45.0), (0.5, 91.0)], samples_per_batch=4, sustain_s=15.0)
    t, reports = _feed(r, 0.5, 400, 0.044, 0.0)  # sustained
    assert reports == 0
    _, reports = _feed(r, 0.5, 800, 0.05, t)  # slower later: the top is not timed again
    assert reports == 0 and r.refined == 0


def test_a_new_point_is_then_held_to_its_sustained_speed():
    r = Refiner([(0.5, 45.0)], samples_per_batch=4, guessed=None, sustain_s=15.0)
    t, reports = _feed(r, 1.0, 40, 0.045, 0.0)  # measured in a short window: 88.9
    assert reports == 1 and abs(dict(r.points)[1.0] - 4 / 0.045) < 1e-6
    _, reports = _feed(r, 1.0, 400, 0.05, t)  # then 80 for 20 s (the window began in the quick steps)
    assert reports == 1 and abs(dict(r.points)[1.0] - 80.0) < 0.5 and r.refined == 2


def test_refinements_are_bounded():
    r = Refiner([(1.0, 10.0)], samples_per_batch=1, max_points=2)
    t = 0.0
    total = 0
    for cpus in (2.0, 3.0, 4.0, 5.0):
        t, n = _feed(r, cpus, 20, 0.1, t)
        total += n
    assert total == 2 and r.done


def test_a_gain_within_measurement_noise_is_no_gain() -> None:
    """The quiet physical run: a loading-light job measured 88.9 samples/s at a quarter core
    and 91.0 at half, and TUNE gave it the half core (the second job of the same kind, 90.8
    and 90.4, got a quarter). Within NOISE_TOLERANCE a higher point is the best below it."""
    assert flatten_noise([(0.25, 88.9), (0.5, 91.0)]) == [(0.25, 88.9), (0.5, 88.9)]
    assert flatten_noise([(0.5, 90.4), (0.25, 90.8)]) == [(0.25, 90.8), (0.5, 90.8)]  # never falls
    heavy = [(0.25, 23.0), (0.5, 45.6), (1.0, 60.0), (2.0, 61.0)]
    assert flatten_noise(heavy) == [(0.25, 23.0), (0.5, 45.6), (1.0, 60.0), (2.0, 60.0)]
    from synergy.scheduler.profiles.format import SensitivityProfile
    from synergy.profiler.fill import complete_profile

    doc = complete_profile(flatten_noise([(0.25, 88.9), (0.5, 91.0)]), gpus=1, dataset_bytes=10**6,
                           sample_bytes=1e3, storage_bytes_per_s=1e15, process_mem_gb=0.5, max_mem_gb=4.0,
                           model="light", task="image")
    assert SensitivityProfile.from_dict("light", doc).best_case()[0] == 0.25
