"""`benchmarks/physical.py --what-if shaped`: the what-if simulation without a kept live run
(profiles shaped like the measured ones), and `--every-job-profiles` (issue 14)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import physical  # noqa: E402


def _what_if(capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    capsys.readouterr()
    assert physical.main(["--what-if", "shaped", "--trace", "dynamic", "--jobs", "8", "--gap-s", "60",
                          "--samples", "480", *flags]) == 0
    return capsys.readouterr().out


def test_shaped_profiles_need_no_kept_run_and_every_job_may_profile(capsys: pytest.CaptureFixture[str]) -> None:
    # Lengths cycle 1x/2x/3x: jobs 6 and 7 repeat the commands of jobs 0 and 1, profiled by then.
    assert "6 of 8 jobs profile live" in _what_if(capsys)
    out = _what_if(capsys, "--every-job-profiles")
    assert "8 of 8 jobs profile live" in out and "profiles shaped like the measured ones" in out, out
    rows = {line.split("  ")[1].strip(): line for line in out.splitlines()[2:]}
    assert set(rows) == {"proportional", "tune", "tune, profiles known"}, out
    # The heavy jobs gain from CPU above their half core and the light ones do not: TUNE beats
    # proportional on the average JCT (the arrivals, a minute apart, set the makespan).
    assert float(rows["tune, profiles known"].split()[-2].rstrip(",x")) > 1.1, out
