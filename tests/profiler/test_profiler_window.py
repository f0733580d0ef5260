"""ThroughputWindow: warm-up excluded, samples/s over the timed iterations, clock injected."""
from __future__ import annotations

import pytest

from synergy.profiler.window import ThroughputWindow


def test_warmup_iterations_are_excluded():
    w = ThroughputWindow(warmup=2, measure=3)
    w.tick(10.0, 32)  # slow first iterations: workers starting
    w.tick(15.0, 32)  # ends the warm-up: the start mark
    assert not w.done and w.samples_per_s == 0.0
    for t in (16.0, 17.0, 18.0):
        w.tick(t, 32)
    assert w.done and w.measured_iterations == 3
    assert w.samples_per_s == pytest.approx(96 / 3.0)
    w.tick(100.0, 32)  # after done: ignored
    assert w.samples_per_s == pytest.approx(32.0) and w.elapsed_s == 3.0


def test_warmup_zero_spends_the_first_tick_as_the_mark():
    w = ThroughputWindow(warmup=0, measure=2)
    w.tick(0.0, 8)
    w.tick(0.5, 8)
    assert not w.done
    w.tick(1.0, 8)
    assert w.done and w.samples_per_s == pytest.approx(16.0)


def test_partial_rate_before_done():
    w = ThroughputWindow(warmup=1, measure=10)
    w.tick(0.0, 4)
    w.tick(2.0, 4)
    assert w.samples_per_s == pytest.approx(2.0) and not w.done


@pytest.mark.parametrize("kwargs, message", [
    ({"warmup": -1, "measure": 1}, "warmup"), ({"warmup": 1, "measure": 0}, "measure"),
    ({"warmup": 1.5, "measure": 1}, "warmup"), ({"warmup": 1, "measure": 1, "min_s": -1.0}, "min_s"),
    ({"warmup": 1, "measure": 1, "min_s": float("inf")}, "min_s"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ThroughputWindow(**kwargs)


def test_bad_ticks_change_nothing():
    w = ThroughputWindow(warmup=1, measure=2)
    w.tick(5.0, 1)
    for now, samples, message in ((4.0, 1, "backwards"), (float("nan"), 1, "now_s"), (6.0, -1, "samples")):
        with pytest.raises(ValueError, match=message):
            w.tick(now, samples)
    w.tick(6.0, 10)
    w.tick(7.0, 10)
    assert w.done and w.samples_per_s == pytest.approx(10.0)


def test_a_fast_job_is_measured_for_min_s_not_for_a_few_quota_periods():
    """A light job's 8 iterations took 0.35 s on the physical run: a few CFS periods, whose
    bursts made its quarter and half core read 83.4 / 89.0 and then 88.9 / 83.5 samples/s."""
    w = ThroughputWindow(warmup=1, measure=8, min_s=1.0)
    t = 0.0
    w.tick(t, 4)  # the start mark
    ticks = 0
    while not w.done:
        t += 0.042
        ticks += 1
        w.tick(t, 4)
    assert ticks == 24 and w.elapsed_s >= 1.0 and w.samples_per_s == pytest.approx(4 / 0.042)
    slow = ThroughputWindow(warmup=1, measure=8, min_s=1.0)  # slower iterations: the count decides
    for k in range(9):
        slow.tick(0.5 * k, 4)
    assert slow.done and slow.measured_iterations == 8
