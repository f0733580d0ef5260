"""The physical benchmark's short form (benchmarks/physical.py, issue 14): the mechanics,
not the gain. Four jobs (60 steps each: long enough to report a profile) on four fake GPUs and two cores under TUNE with live profiling:
every job succeeds, no placed job is taken back "before it started" by a profiling lease,
the light jobs were profiled below one CPU (the share is half a core per GPU), and the
simulator replays the run's trace with the profiles it measured, and simulates other traces
with them (`--what-if`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent_harness import is_root_with_v1

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import physical  # noqa: E402

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 (CI runs as root)")


def test_the_short_physical_run_keeps_its_mechanics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The benchmark's own flags and defaults (two DataLoader workers per job among them).
    args = physical.parser().parse_args(["--jobs", "4", "--round-s", "1", "--samples", "480", "--timeout-s", "240"])
    run = physical.run("tune", args, tmp_path)
    outcomes, makespan = run.outcomes, run.makespan_s
    assert [o.state for o in outcomes] == ["succeeded"] * 4, [(o.name, o.state, o.reason) for o in outcomes]
    assert sum(o.before_started for o in outcomes) == 0
    assert makespan > 0
    assert all(o.profiling_s > 0 for o in outcomes), [(o.name, o.profiling_s, o.profile_source) for o in outcomes]
    # The simulated replay runs on the live run's trace and measured profiles.
    run.startup_s = physical.startup_s(tmp_path / "state-tune.log")
    profiles = physical.measured_profiles(run)
    assert set(profiles) == {o.name for o in outcomes}
    sim_makespan, jcts = physical.simulate("tune", run, profiles, 1.0, args)
    assert len(jcts) == 4 and sim_makespan >= max(jcts) > 0
    # Below the half-core lease each job asked for a quarter core: the daemon's log has the
    # points it set (the lease's own half core needs no change).
    events = [json.loads(line) for line in (tmp_path / "state-tune.log").read_text().splitlines()
              if line.startswith("{")]
    points = {(e["job"], e["cpus"]) for e in events if e.get("event") == "job.profile_point"}
    assert any(cpus == 0.25 for _, cpus in points), sorted(points)
    # Four arrivals, four GPUs, two cores: every one profiled at once on a half-core lease, and
    # ran on without a restart (one launch each: the lease's process trained to the end).
    leases = [e["placement"] for e in events if e.get("event") == "job.profiling"]
    assert leases == ["n0: 1 GPU, 0.5 CPU, 1 GB"] * 4, leases
    assert sorted(e["job"] for e in events if e.get("event") == "node.launch") == [1, 2, 3, 4]
    # --what-if: other traces simulated with what this run measured (its profiles by kind, its
    # node, lease and start-up), nothing run live.
    out = _what_if(capsys, tmp_path, "--trace", "dynamic", "--jobs", "8", "--gap-s", "60")
    # Lengths cycle 1x/2x/3x: jobs 6 and 7 repeat jobs 0 and 1's commands after those were
    # profiled, so they take the stored profiles, as the daemon's profile store would.
    assert "6 of 8 jobs profile live" in out, out
    rows = {line.split("  ")[1].strip(): line for line in out.splitlines()[2:]}
    assert set(rows) == {"proportional", "tune", "tune, profiles known"}, out
    assert "x, " in rows["tune"] and "x, " not in rows["proportional"], out
    # Each mechanism runs its own jobs (a simulation records progress in the jobs it is given:
    # reused, the second run's jobs were done on arrival and read 44x).
    ratios = [float(cell.rstrip(",x")) for name in ("tune", "tune, profiles known") for cell in rows[name].split()[-3:]]
    assert len(ratios) == 6 and all(0.5 < r < 3 for r in ratios), out
    assert "8 of 8 jobs profile live" in _what_if(capsys, tmp_path, "--trace", "static", "--jobs", "8")
    assert physical.main(["--what-if", str(tmp_path / "nothing-here")]) == 2
    assert "no TUNE run kept there" in capsys.readouterr().err


def _what_if(capsys: pytest.CaptureFixture[str], kept: Path, *flags: str) -> str:
    capsys.readouterr()
    assert physical.main(["--what-if", str(kept), "--samples", "480", *flags]) == 0
    return capsys.readouterr().out
