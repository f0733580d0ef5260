"""The simulator runs CPU-only jobs through CODA's CPU array and reports what they cost."""
from __future__ import annotations

from pathlib import Path

import pytest

from synergy.scheduler.simulator.cli import main
from synergy.scheduler.simulator.cpu_jobs import CpuJobParams, read_cpu_trace
from synergy.scheduler.simulator.errors import SimInputError
from synergy.scheduler.simulator.experiment import RunSpec, prepare, simulate


def small(**kw) -> RunSpec:
    return RunSpec(servers=2, jobs=40, load=4.0, seed=1, **kw)


def test_cpu_jobs_on_cpu_servers_complete_and_leave_gpu_jobs_as_fast() -> None:
    spec = small(cpu_jobs=CpuJobParams(rate_per_h=6.0, cpus=4.0, mem_gb=8.0, duration_h=0.2), cpu_servers=2,
                 borrow_fraction=0.0)
    m = simulate(prepare(spec)).metrics
    assert m["cpu_jobs"] > 0 and m["cpu_jobs_completed"] == m["cpu_jobs"]
    assert m["cpu_avg_jct_h"] is not None and m["cpu_avg_jct_h"] > 0
    assert m["gpu_jct_slowdown"] == pytest.approx(1.0)  # nothing borrowed: training untouched


def test_borrowing_without_cpu_servers_runs_cpu_jobs_and_reports_the_gpu_cost() -> None:
    spec = small(cpu_jobs=CpuJobParams(rate_per_h=6.0, cpus=4.0, mem_gb=8.0, duration_h=0.2))
    m = simulate(prepare(spec)).metrics
    assert m["cpu_jobs_completed"] > 0
    assert m["gpu_jct_slowdown"] is not None and m["gpu_jct_slowdown"] >= 1.0 - 1e-9


def test_cpu_trace_is_read_and_bad_rows_name_the_field(tmp_path: Path) -> None:
    good = tmp_path / "cpu.csv"
    good.write_text("job_id,user,arrival_s,cpus,mem_gb,duration_s\n1000000,etl,0,4,16,600\n1000001,ml,10,2,4,60\n")
    trace = read_cpu_trace(good)
    assert [t.user for t in trace] == ["etl", "ml"]
    m = simulate(prepare(small(cpu_trace=str(good), cpu_servers=1))).metrics
    assert m["cpu_jobs_completed"] == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,user,arrival_s,cpus,mem_gb,duration_s\n1000000,etl,0,-4,16,600\n")
    with pytest.raises(SimInputError, match="row 1: field 'cpus' must be > 0"):
        read_cpu_trace(bad)


def test_cli_flags_and_a_bad_fraction(capsys) -> None:
    assert main(["--servers", "2", "--jobs", "30", "--load", "4", "--cpu-jobs-per-h", "4",
                 "--cpu-servers", "1"]) == 0
    assert "CPU-only jobs:" in capsys.readouterr().out
    assert main(["--servers", "2", "--jobs", "30", "--borrow-fraction", "2"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "synergy-sim: error: --borrow-fraction must be within [0, 1], got 2.0"
