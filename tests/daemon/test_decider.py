"""Rounds decided in the worker process: the same answers as inline, and no round lost
when the worker dies."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from profiles_for_tests import ZOO_LIKE
from synergy.scheduler.daemon.decider import InlineDecider, ProcessDecider, from_env
from synergy.scheduler.model import Cluster, Job, RoundInput
from synergy.scheduler.registry import build_scheduler


class Events(logging.Handler):
    """The decider's structured events, by name."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[tuple[str, dict]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.getMessage(), dict(getattr(record, "fields", {}))))

    def where(self) -> list[str]:
        return [f["where"] for name, f in self.seen if name == "round.decided"]


@pytest.fixture
def log() -> logging.Logger:
    logger = logging.getLogger("synergyd.test-decider")
    logger.handlers[:] = [Events()]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger


def a_round(n: int = 40) -> RoundInput:
    names = sorted(ZOO_LIKE)
    jobs = [Job(i, names[i % 4], (1, 2, 1, 4)[i % 4], float(i // 3), 1e4, ZOO_LIKE[names[i % 4]]) for i in range(n)]
    return RoundInput(0.0, Cluster.homogeneous(4, gpus=8, cpus=24, mem_gb=500), jobs)


def test_worker_decides_exactly_what_the_core_decides(log: logging.Logger) -> None:
    decider = ProcessDecider(log, min_jobs=10)
    inp = a_round()
    try:
        for policy, mechanism in (("fifo", "tune"), ("srtf", "greedy"), ("las", "proportional"), ("fifo", "opt")):
            scheduler = build_scheduler(policy, mechanism)
            assert decider.decide(scheduler, inp) == scheduler.schedule(inp), (policy, mechanism)
        small = RoundInput(inp.now_s, inp.cluster, inp.jobs[:5])
        assert decider.decide(build_scheduler("fifo", "tune"), small) == build_scheduler("fifo", "tune").schedule(small)
    finally:
        decider.close()
    # The first large round starts the worker and is decided inline; small ones stay inline.
    assert log.handlers[0].where() == ["inline", "worker", "worker", "worker", "inline"]


def test_a_lost_worker_loses_no_round(log: logging.Logger) -> None:
    decider = ProcessDecider(log, min_jobs=10)
    scheduler, inp = build_scheduler("fifo", "tune"), a_round()
    expected = scheduler.schedule(inp)
    try:
        decider.decide(scheduler, inp)  # starts the worker
        assert decider.decide(scheduler, inp) == expected
        worker = decider._worker
        assert worker is not None and worker.proc.is_alive()
        worker.proc.kill()
        worker.proc.join(timeout=30)
        assert decider.decide(scheduler, inp) == expected  # decided inline instead
        assert decider.decide(scheduler, inp) == expected  # by a fresh worker
        assert decider.decide(scheduler, inp) == expected
        fresh = decider._worker
        assert fresh is not None and fresh.proc.pid != worker.proc.pid and fresh.proc.is_alive()
    finally:
        decider.close()
    events = log.handlers[0]
    assert [n for n, _ in events.seen if n.startswith("decider.")] == [
        "decider.started", "decider.worker_lost", "decider.started"
    ]
    assert events.where() == ["inline", "worker", "inline", "inline", "worker"]
    fresh.proc.join(timeout=30)
    assert not fresh.proc.is_alive()  # close() stops the worker


def test_inline_is_only_chosen_on_request(log: logging.Logger) -> None:
    assert isinstance(from_env("inline", log), InlineDecider)
    assert isinstance(from_env(" Inline ", log), InlineDecider)
    chosen = from_env(None, log)
    assert isinstance(chosen, ProcessDecider) and chosen._worker is None  # started on the first large round
    chosen.close()


def test_the_worker_loads_the_cores_lazy_imports_before_its_first_round() -> None:
    """The core imports scipy's solver on first use (0.3-0.4 s of CPU); the worker loads it
    as it starts, so its first round does not pay for it. Run as the worker runs: `_serve`
    on a pipe the daemon has already closed (it returns at the first `recv`)."""
    code = (
        "import multiprocessing, sys\n"
        "from synergy.scheduler.daemon.decider import _serve\n"
        "assert 'scipy.optimize' not in sys.modules\n"
        "ours, theirs = multiprocessing.Pipe()\n"
        "ours.close()\n"
        "_serve(theirs)\n"
        "print('scipy.optimize' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
