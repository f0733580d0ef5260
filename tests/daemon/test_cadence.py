"""The round's cadence stretched under load (cadence.py): a daemon whose cadence would ask for
more calls a second than --max-rpc-rate lengthens the renewal and heartbeat intervals and the
timeouts counted in them, rather than losing nodes and leases because it is late itself
(issue 17's 1 s stress at 10,000 jobs never settled without it)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from synergy.scheduler.daemon.app import Logic
from synergy.scheduler.daemon.cadence import FALL_BELOW, MAX_LEVEL, Cadence, stretch_of
from synergy.scheduler.daemon.clock import ManualClock
from synergy.scheduler.daemon.config import ConfigError, DaemonConfig, load_config
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.events import CadenceEvent
from synergy.scheduler.daemon.profiles import ProfileBook
from synergy.scheduler.daemon.records import JobSpec, JobState, NodeRecord
from synergy.scheduler.daemon.store import MemoryStore
from synergy.scheduler.daemon.store.sqlite import SqliteStore
from synergy.scheduler.model import Resources


def test_the_stretch_is_the_lowest_step_of_root_two_that_fits_the_cap() -> None:
    c = Cadence(max_rate=100)
    assert [c.needed(a) for a in (0, 100, 101, 141.4, 141.5, 200, 512.8, 565)] == [0, 0, 1, 1, 2, 2, 5, 5]
    assert stretch_of(5) == pytest.approx(4 * math.sqrt(2)) and stretch_of(2) == 2.0
    assert Cadence(max_rate=0).needed(1e9) == 0  # no cap
    assert Cadence(max_rate=1).needed(1e12) == MAX_LEVEL


def test_it_rises_at_once_falls_a_step_at_a_time_and_the_timeouts_keep_a_fallen_stretch_for_the_hold() -> None:
    c = Cadence(max_rate=100)
    assert c.update(510, now=0, hold_s=30) and c.level == 5 and c.timeouts(0) == c.stretch
    assert not c.update(510, now=1, hold_s=30)
    # Level 4 would carry 400 calls a second at 400 / (4 * 100) = 100% of the cap: not below 80%.
    assert not c.update(400, now=2, hold_s=30)
    assert c.update(FALL_BELOW * 100 * 4, now=3, hold_s=30) and c.level == 4
    assert c.timeouts(32.9) == stretch_of(5) and c.timeouts(33) == 4.0
    assert c.update(10, now=4, hold_s=20) and c.level == 3  # one step per update
    assert c.timeouts(30) == stretch_of(5)  # the highest still held
    assert c.timeouts(24) == stretch_of(5) and c.timeouts(33.5) == stretch_of(3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5000), st.floats(0, 20)), min_size=1, max_size=40),
       st.sampled_from([0.0, 1.0, 100.0, 1000.0]), st.floats(1, 60))
def test_the_cadence_fits_the_cap_and_no_timeout_shortens_before_clients_can_have_heard(
        steps: list[tuple[float, float]], cap: float, hold: float) -> None:
    c, now = Cadence(max_rate=cap), 0.0
    falls: list[tuple[float, float]] = []  # (when, the stretch it fell from)
    for asked, dt in steps:
        now += dt
        was = c.stretch
        c.update(asked, now, hold)
        if c.stretch < was:
            falls.append((now, was))
        assert c.stretch == stretch_of(c.level) and 0 <= c.level <= MAX_LEVEL
        assert cap == 0 and c.level == 0 or asked <= cap * c.stretch or c.level == MAX_LEVEL
        assert c.timeouts(now) >= c.stretch
        assert all(c.timeouts(now) >= s for t, s in falls if now < t + hold)


def logic_with(n_jobs: int, max_rpc_rate: float) -> Logic:
    """`n_jobs` one-GPU jobs running on one node, every rank renewed at time 0; round 10 s, so
    renewals and heartbeats every 1 s and lease grace and node timeout 3 s, unstretched."""
    config = DaemonConfig(state_dir=Path("unused"), round_s=10, max_rpc_rate=max_rpc_rate)
    logic = Logic.build(DaemonContext(config, ManualClock(), MemoryStore(), ProfileBook({})))
    logic.nodes.register(NodeRecord("n", "n", Resources(n_jobs, 4 * n_jobs, 64 * n_jobs), Resources()), [])
    ids = [logic.jobs.submit(JobSpec(name=f"j{i}", command=("train",), gpus=1, profiler="none")).id
           for i in range(n_jobs)]
    logic.rounds.apply(logic.rounds.plan())
    for jid in ids:
        assert logic.jobs.get(jid).state == JobState.RUNNING
        logic.leases.register_process(jid, jid, 1, 0, 1)
        logic.leases.renew(jid, jid, 1, 0, step=10, samples_per_s=10, steps_per_s=1)
    return logic


@pytest.mark.parametrize("cap", [5.0, 0.0])
def test_a_stretched_daemon_keeps_leases_and_nodes_its_unstretched_timeouts_would_lose(cap: float) -> None:
    """8 ranks and 1 node at 1 s ask 9 calls a second: a cap of 5 doubles every interval and
    timeout, so 4 s of silence (past the 3 s unstretched) loses nothing; without a cap the same
    silence requeues every job and loses the node (the test fails with the stretch unread)."""
    logic = logic_with(8, cap)
    CadenceEvent(logic).run()
    ctx = logic.ctx
    stretched = cap > 0
    assert ctx.cadence.stretch == (2.0 if stretched else 1.0)
    assert (ctx.renew_interval_s, ctx.heartbeat_interval_s) == ((2.0, 2.0) if stretched else (1.0, 1.0))
    assert ctx.metrics.cadence_stretch._value.get() == ctx.cadence.stretch
    ctx.clock.advance(4.0)
    lost = logic.nodes.check_liveness()
    requeued = logic.leases.expire()
    if stretched:
        assert (lost, requeued) == ([], 0)
        assert all(j.state == JobState.RUNNING for j in ctx.store.active_jobs())
    else:
        assert lost == ["n"] and all(j.state != JobState.RUNNING for j in ctx.store.active_jobs())


def test_the_stretch_eases_off_as_jobs_end_and_the_timeouts_hold_meanwhile() -> None:
    logic = logic_with(8, 5.0)
    ctx, event = logic.ctx, CadenceEvent(logic)
    event.run()
    assert ctx.cadence.stretch == 2.0 and ctx.store.renewing_ranks() == 8
    for job in ctx.store.active_jobs()[:6]:  # 2 ranks + 1 node left: 3 calls a second
        ctx.save_jobs([(job, logic.jobs.cancel(job, "test"))])
    event.run()
    assert ctx.cadence.stretch == stretch_of(1)  # one step down
    event.run()
    assert ctx.cadence.stretch == 1.0 and ctx.renew_interval_s == 1.0
    now = ctx.clock.now()
    # Held: clients told 2 s may renew at 2 s until their next answer.
    assert ctx.lease_grace(now) == 6.0 and ctx.node_timeout(now) == 6.0
    ctx.clock.advance(60)
    assert ctx.lease_grace(ctx.clock.now()) == 3.0


def walked(store) -> int:
    return sum(len(j.placements) for j in store.active_jobs() if j.placed and not j.spec.cpu_only)


def test_the_store_counts_renewing_ranks_as_jobs_are_saved_and_after_a_reload(tmp_path: Path) -> None:
    """The cadence reads the count every second, so the store keeps it rather than walking
    10,000 jobs: placed ranks of jobs that renew, not CPU-only ones, not ended ones."""
    logic = logic_with(6, 0.0)
    ctx = logic.ctx
    logic.nodes.register(NodeRecord("c", "c", Resources(0, 8, 32), Resources()), [])  # CPU-only
    cpu = logic.jobs.submit(JobSpec(name="batch", command=("make",), gpus=0, kind="cpu", cpus_hint=1, mem_gb_hint=1,
                                    profiler="none"))
    logic.rounds.apply(logic.rounds.plan())
    assert logic.jobs.get(cpu.id).placed  # placed, but a plain command: no lease
    assert ctx.store.renewing_ranks() == walked(ctx.store) == 6
    for job in ctx.store.active_jobs()[:2]:
        ctx.save_jobs([(job, logic.jobs.cancel(job, "test"))])
    assert ctx.store.renewing_ranks() == walked(ctx.store) == 4
    disk = SqliteStore(tmp_path / "state.sqlite")
    disk.save_jobs(ctx.store.jobs())
    disk.close()
    again = SqliteStore(tmp_path / "state.sqlite")
    assert again.renewing_ranks() == walked(again) == 4
    again.close()


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_max_rpc_rate_stops_the_daemon_naming_the_flag(value: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^--max-rpc-rate must be a number >= 0"):
        load_config(["--state-dir", str(tmp_path), "--max-rpc-rate", value])
    assert load_config(["--state-dir", str(tmp_path), "--max-rpc-rate", "0"]).max_rpc_rate == 0
