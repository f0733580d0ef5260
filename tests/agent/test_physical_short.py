"""The physical benchmark's short form (benchmarks/physical.py, issue 14): the mechanics,
not the gain. Four jobs on four fake GPUs and two cores under TUNE with live profiling:
every job succeeds, no placed job is taken back "before it started" by a profiling lease,
and the light jobs were profiled below one CPU (the share is half a core per GPU)."""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from agent_harness import is_root_with_v1

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import physical  # noqa: E402

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 (CI runs as root)")


def test_the_short_physical_run_keeps_its_mechanics(tmp_path: Path) -> None:
    args = Namespace(jobs=4, gpus=4, cpus="0-1", memory="4G", round_s=1.0, samples=96, batch_size=4, step_s=0.04,
                     heavy_cpu_ms=10.0, light_cpu_ms=0.5, timeout_s=240.0)
    outcomes, makespan = physical.run("tune", args, tmp_path)
    assert [o.state for o in outcomes] == ["succeeded"] * 4, [(o.name, o.state, o.reason) for o in outcomes]
    assert sum(o.before_started for o in outcomes) == 0
    assert makespan > 0 and all(o.profiling_s > 0 for o in outcomes)
    # The light jobs asked for half a core: the daemon's log has the points it set.
    events = [json.loads(line) for line in (tmp_path / "state-tune.log").read_text().splitlines()
              if line.startswith("{")]
    points = {(e["job"], e["cpus"]) for e in events if e.get("event") == "job.profile_point"}
    assert any(cpus == 0.5 for _, cpus in points), sorted(points)
