"""`synergy-sim` as users run it: a real subprocess, its exit code, stdout and stderr."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

#: A small, fast experiment: 16 GPUs, 120 single-GPU jobs.
SMALL = ["--servers", "2", "--jobs", "120", "--load", "1.5"]


def sim(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "synergy.scheduler.simulator.cli", *args],
                          capture_output=True, text=True, timeout=240, cwd=cwd)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("synergy-sim: error: "), proc.stderr
    return lines[0]


@pytest.fixture
def trace_file(tmp_path: Path):
    def write(body: str) -> Path:
        path = tmp_path / "t.csv"
        path.write_text("job_id,model,arrival_s,iterations,gpus\n" + body)
        return path
    return write


@pytest.mark.parametrize("body,needles", [
    ("0,resnet18,0,1000,1\n1,resnet18,0,lots,1\n", ["row 2", "field 'iterations'"]),
    ("0,resnet18,0,1000,1\n1,bert_huge,0,1000,1\n", ["row 2", "field 'model'", "bert_huge"]),
    ("0,resnet18,0,1000,32\n", ["row 1", "field 'gpus'", "32 GPUs", "has 16"]),
])
def test_bad_trace_rows(trace_file, body: str, needles: list[str]) -> None:
    path = trace_file(body)
    line = one_line_error(sim("--servers", "2", "--trace", str(path)))
    assert str(path) in line
    for needle in needles:
        assert needle in line


@pytest.mark.parametrize("args,needle", [
    (["--policy", "lottery"], "--policy"),
    (["--mechanism", "magic"], "--mechanism"),
    (["compare", "--mechanisms", "proportional,magic"], "magic"),
    (["--measure", "5000:4000"], "--measure"),
    (["--measure", "7000:8000", "--jobs", "50"], "selects no job"),
    (["--split", "20,70"], "--split"),
    (["--split", "50,50,50"], "--split"),
    (["--servers", "0"], "--servers"),
    (["--opt-placement-limit", "-1"], "--opt-placement-limit"),
    (["--trace", "/nonexistent/t.csv"], "cannot read"),
    (["--trace", "/nonexistent/t.csv", "--load", "3"], "--load"),
    (["--profiles", "/nonexistent/p.json"], "--profiles"),
    (["sweep", "--loads", "4,x", "--out", "o"], "--loads"),
    (["--bogus-flag"], "unrecognized"),
    (["--gpu-mix", "1:0.5,x"], "--gpu-mix"),
    (["--gpu-mix", "1:0"], "--gpu-mix"),
    (["--gpu-mix", "64:1", "--servers", "1"], "--gpu-mix"),
    (["--migration-cost-s", "300"], "--migration-cost-s"),
    (["--start-cost-s", "-1"], "--start-cost-s"),
    (["--start-cost-s", "nan"], "--start-cost-s"),
    (["--pairs", "p.json"], "--pairs is the pair table of packing; add --packing"),
    (["--packing", "--pairs", "/nonexistent/p.json"], "--pairs: /nonexistent/p.json: cannot read"),
])
def test_bad_flags_exit_2_with_one_line(args: list[str], needle: str) -> None:
    assert needle in one_line_error(sim(*args))


def test_help_explains_every_flag() -> None:
    out = sim("--help")
    assert out.returncode == 0
    for flag in ("--servers", "--gpus-per-server", "--cpus-per-server", "--mem-per-server", "--policy",
                 "--mechanism", "--load", "--jobs", "--multi-gpu", "--static", "--split", "--seed",
                 "--round-s", "--measure", "--profiles", "--trace", "--record-trace", "--json",
                 "--utilisation-csv", "--max-time-h", "--opt-placement-limit"):
        assert flag in out.stdout
    for sub in ("compare", "sweep"):
        sub_help = sim(sub, "--help")
        assert sub_help.returncode == 0 and "--opt-placement-limit" in sub_help.stdout


def test_json_run_record_and_replay_round_trip(tmp_path: Path) -> None:
    trace = tmp_path / "rec.csv"
    util = tmp_path / "util.csv"
    first = sim(*SMALL, "--multi-gpu", "--seed", "4", "--json", "--record-trace", str(trace),
                "--utilisation-csv", str(util))
    assert first.returncode == 0, first.stderr
    a = json.loads(first.stdout)
    for key in ("avg_jct_h", "median_jct_h", "p95_jct_h", "p99_jct_h", "makespan_h", "avg_queue_delay_h",
                "gpu_util", "cpu_util", "mem_util", "cpu_used", "mem_used", "jobs_measured", "rounds", "wall_s"):
        assert key in a
    second = sim("--servers", "2", "--trace", str(trace), "--json")
    assert second.returncode == 0, second.stderr
    b = json.loads(second.stdout)
    a.pop("wall_s"), b.pop("wall_s"), a.pop("load"), b.pop("load"), a.pop("seed"), b.pop("seed")
    assert a == b
    with open(util) as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(0.0 <= float(r["gpu_frac"]) <= 1.0 for r in rows)
    for res in ("cpu", "mem"):
        assert all(0.0 <= float(r[f"{res}_used_frac"]) <= float(r[f"{res}_frac"]) + 1e-6 for r in rows)


def test_compare_tune_is_no_worse_than_proportional() -> None:
    out = sim("compare", "--mechanisms", "proportional,tune", *SMALL, "--json", "--jobs-parallel", "1")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["tune"]["avg_jct_h"] <= res["proportional"]["avg_jct_h"]
    table = sim("compare", "--mechanisms", "proportional,greedy,tune", *SMALL, "--jobs-parallel", "2")
    assert table.returncode == 0, table.stderr
    assert "greedy" in table.stdout and "ratio to proportional" in table.stdout
    # issue 15 (7): `compare` (so `make reproduce`) printed nothing for 41 s; a bar on stderr now
    assert "compare proportional, greedy, tune" in table.stderr and "3/3" in table.stderr, table.stderr


def test_sweep_writes_csv_and_plots(tmp_path: Path) -> None:
    out_dir = tmp_path / "sweep"
    proc = sim("sweep", "--servers", "1", "--jobs", "40", "--loads", "0.5,1", "--mechanisms",
               "proportional,tune", "--seeds", "0,1", "--out", str(out_dir), "--jobs-parallel", "2")
    assert proc.returncode == 0, proc.stderr
    with open(out_dir / "sweep.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 2 * 2
    assert all(0.0 <= float(r["cpu_used"]) <= float(r["cpu_util"]) + 1e-6 for r in rows)
    assert {(r["load"], r["mechanism"], r["seed"]) for r in rows} == {
        (load, m, s) for load in ("0.5", "1.0") for m in ("proportional", "tune") for s in ("0", "1")}
    for png in ("avg_jct_vs_load.png", "jct_cdf.png"):
        assert (out_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parallel_sweep_writes_what_the_sequential_one_does(tmp_path: Path) -> None:
    # Worker processes (`-j`) change only the wall time: every other column and every JCT
    # is the same as run one after another in this process.
    args = ["sweep", "--servers", "1", "--jobs", "30", "--loads", "0.5,1", "--mechanisms", "proportional,tune",
            "--seeds", "0,1"]
    outs = {}
    for workers in ("1", "2"):
        out_dir = tmp_path / f"j{workers}"
        proc = sim(*args, "--out", str(out_dir), "-j", workers)
        assert proc.returncode == 0, proc.stderr
        assert f"sweep ({workers} workers)" in proc.stderr  # the progress bar
        with open(out_dir / "sweep.csv") as fh:
            rows = [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(fh)]
        outs[workers] = (rows, (out_dir / "jcts.csv").read_text())
    assert len(outs["1"][0]) == 8 and outs["1"] == outs["2"]


def test_packing_run_reports_packed_jobs_and_a_bad_pair_entry_is_one_line(tmp_path: Path) -> None:
    # One 8-GPU server, a queue: jobs left pending share placed ones' GPUs (rule-generated pairs).
    args = ["--servers", "1", "--jobs", "60", "--load", "6", "--multi-gpu", "--measure", "0:60"]
    out = sim(*args, "--packing", "--json")
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout)
    assert m["packing"] is True and m["packed_jobs"] > 0 and m["packed_per_round"] > 0
    assert 0.0 <= m["gpu_util"] <= 1.0  # a pair's GPUs count once
    off = json.loads(sim(*args, "--json").stdout)
    assert off["packed_jobs"] == 0
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"format": "synergy-profile/v1", "models": {},
                               "pairs": [{"models": ["resnet18", "gpt2"], "throughput": [0.7, 2]}]}))
    line = one_line_error(sim(*args, "--packing", "--pairs", str(bad)))
    assert "pairs[0] ('resnet18', 'gpt2'): field 'throughput'" in line
    text = sim(*args, "--packing")
    assert text.returncode == 0 and "packed jobs per round" in text.stdout
