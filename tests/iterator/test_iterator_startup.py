"""The wrap ends its task's start-up phase (synergy.common.startup) before its first batch.

In-process, no daemon at the contract's address (as test_periodic_checkpoints.py): the agent's
half is a real `synergy.agent.startup.Startup` answered from a thread, late on purpose. The
first batch must be fetched after the answer (the quota is in force), so no profiling window,
which runs in the loop, measures the process beyond its allocation. At exit the wrap says its
process is winding down on the same socket (the agent lifts the quota for the teardown).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Iterator

from synergy.agent.startup import Line, Startup
from synergy.common import contract
from synergy.common.contract import JobEnv
from synergy.common.startup import env_value
from synergy.iterator import SynergyIterator
from synergyd_harness import wait_for


class Timed:
    """An iterable of batches that notes when the first one was fetched."""

    def __init__(self) -> None:
        self.first_fetch = 0.0

    def __iter__(self) -> Iterator[int]:
        for i in range(3):
            if not self.first_fetch:
                self.first_fetch = time.monotonic()
            yield i


def test_the_first_batch_comes_after_the_agent_applied_the_quota() -> None:
    phase, job_fd = Startup.open(time.monotonic(), 60)
    os.set_inheritable(job_fd, True)
    environ = JobEnv(job_id=1, attempt=1, rank=0, world_size=1, daemon_address="127.0.0.1:1",
                     job_token="t").to_env()
    environ[contract.STARTUP_FD] = env_value(job_fd)
    times: dict[str, float] = {}
    lines: list[Line] = []

    def agent() -> None:
        wait_for(lambda: phase.heard() != "", timeout=30, what="the job's word")
        times["heard"] = time.monotonic()
        time.sleep(0.3)  # writing the quota, or a busy agent loop
        times["answered"] = time.monotonic()
        lines.append(phase.answer())

    threading.Thread(target=agent, daemon=True).start()
    loader = Timed()
    it = SynergyIterator(loader, state={}, environ=environ)
    try:
        assert "heard" not in times  # the wrap's construction says nothing: the script may build its model after
        assert list(it) == [0, 1, 2]
        assert times["heard"] < times["answered"] <= loader.first_fetch
        assert contract.STARTUP_FD not in environ
        assert list(it) == [0, 1, 2]  # the next epoch: nothing more to say
        # At exit (the atexit hook), before anything else: the process is winding down. The
        # agent thread keeps its line once `answer` has returned, which the job may outrun.
        wait_for(lambda: lines, timeout=10, what="the agent thread to keep its line")
        [line] = lines
        assert not line.winding_down()
        it.lease.close()  # type: ignore[union-attr]
        it._at_exit()
        assert line.winding_down() and line.sock is None
    finally:
        assert it.lease is not None
        it.lease.close()
