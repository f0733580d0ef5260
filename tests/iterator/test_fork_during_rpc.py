"""Regression (make demo): a DataLoader that started its workers while the lease thread had an
RPC in flight hung for good: the forked worker blocked in gRPC's fork handler
(`Channel._close_on_fork`), and the job trained nothing until the daemon gave up on it.
The lease now holds a lock across each RPC that a fork takes first (lease.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCENARIO = Path(__file__).with_name("fork_scenario.py")


def test_forks_while_renewals_are_in_flight_never_hang() -> None:
    done = subprocess.run([sys.executable, str(SCENARIO), "60"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "forks ok 60" in done.stdout, done.stdout + done.stderr[-2000:]
