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


def test_table5_split_spreads_its_heavy_jobs_evenly(capsys: pytest.CaptureFixture[str]) -> None:
    # §5.2: the dynamic trace's split is (30,60,10), image and speech heavy: 40% of 8 is 3.
    out = _what_if(capsys, "--split", "table5")
    assert "8 jobs (3 heavy, 5 light)" in out, out
    args = physical.parser().parse_args(["--split", "table5", "--jobs", "10"])
    assert [t.kind for t in physical.trace(args)].count("heavy") == 7  # static: (60,30,10)
    args = physical.parser().parse_args(["--split", "20,70,10", "--jobs", "10", "--trace", "dynamic"])
    assert [t.name for t in physical.trace(args) if t.kind == "heavy"] == ["heavy1", "heavy4", "heavy8"]
    # No split: heavy and light alternate, heavy first, as every run before the flag did.
    args = physical.parser().parse_args(["--jobs", "6"])
    assert [t.kind for t in physical.trace(args)] == ["heavy", "light"] * 3


@pytest.mark.parametrize("split", ["1,2", "a,b,c", "0,0,0", "-1,2,3"])
def test_a_bad_split_is_refused_by_name(split: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        physical.parser().parse_args([f"--split={split}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --split" in err and "three shares IMAGE,LANGUAGE,SPEECH" in err, err


def test_shaped_profiles_follow_the_loading_cost() -> None:
    def rates(*flags: str) -> list[float]:
        heavy = physical.shaped_profiles(physical.parser().parse_args(list(flags)))["heavy"]
        return [round(heavy.speed(c, 1.0) * 90.0, 1) for c in (0.25, 0.5, 1.0, 2.0)]

    # The defaults keep the measured shape (23 / 46 / 90 samples/s); 15 ms a sample needs 1.5 CPUs.
    assert rates() == [23.0, 46.0, 90.0, 90.0]
    assert rates("--heavy-cpu-ms", "15") == [15.3, 30.7, 61.3, 90.0]
