"""`benchmarks/handler_cost.py` runs the servicers' own handlers (issue 17's CPU per RPC):
a change to a handler's signature or to the objects it needs shows here, not at the next
measurement."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import handler_cost  # noqa: E402


def test_it_times_a_heartbeat_of_each_shape_and_a_renewal_of_each_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert handler_cost.main(["--nodes", "2", "--per-node", "3", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    figures = {line.split(":")[0].strip(): float(re.findall(r"([\d.]+) us", line)[0])
               for line in out.splitlines() if line.endswith(" us")}
    assert set(figures) == {"heartbeat, 3 tasks, as daemon_load.py's agents",
                            "heartbeat, 3 tasks, with usage (as synergy-agent)", "renewal (continue)",
                            "renewal left unanswered (quiet, unchanged)"}, out
    assert all(v > 0 for v in figures.values()), out


def test_it_refuses_an_empty_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert handler_cost.main(["--nodes", "0"]) == 2
    assert "--nodes" in capsys.readouterr().err
