"""`make demo`'s driver (examples/local_cluster/demo.py) run as the user runs it: a subprocess
that starts a real synergyd and two real agents with real job processes, and must leave
nothing behind however it ends (finished, Ctrl-C mid-run, SIGTERM while starting)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "local_cluster" / "demo.py"
sys.path.insert(0, str(DEMO.parent))

from cluster import cgroup_dirs  # noqa: E402
from compare import RunResult, comparison_table, verdict  # noqa: E402
from watch import JobSeen  # noqa: E402

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the demo needs two cores")

QUICK = """
jobs:
  - name: tiny-train
    # ~4 s on an idle core: long enough for the demo's 1 s polls to see its allocation
    command: [python, examples/cpu_stress/train_reporter.py, --steps, "4000", --mb, "4"]
    gpus: 1
    model: lstm
  - name: tiny-cpu
    kind: cpu
    command: [python, examples/cpu_stress/stress.py, --seconds, "2", --mb, "4"]
    cpus: 0.5
    memory_gb: 0.25
"""
#: Jobs that outlive the test unless the demo stops them.
ENDLESS = """
jobs:
  - name: forever
    command: [python, examples/cpu_stress/train_reporter.py, --mb, "4"]
    gpus: 1
    model: lstm
  - name: hog
    kind: cpu
    command: [python, examples/cpu_stress/stress.py, --mb, "4"]
    cpus: 0.5
    memory_gb: 0.25
"""


class Demo:
    """The demo as a subprocess, its output read line by line as it comes."""

    def __init__(self, workload: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(DEMO), "--workload", str(workload), "--round-s", "1", *extra],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_line(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        for line in self.lines:
            if m := re.search(pattern, line):
                return m
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if m := re.search(pattern, line):
                return m
        raise AssertionError(f"no line matching {pattern!r} within {timeout:g} s:\n{self.output()}")

    def finish(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the demo did not end within {timeout:g} s:\n{self.output()}") from None
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        return code

    def output(self) -> str:
        return "\n".join(self.lines)

    def root(self) -> Path:
        return Path(self.wait_line(r"^state dir (\S+)", 30).group(1))

    def roots(self) -> list[Path]:
        """Every run's temporary dir (one per mechanism), once the demo has ended."""
        return [Path(m.group(1)) for line in self.lines if (m := re.match(r"^state dir (\S+)", line))]

    def pids(self) -> set[int]:
        """Every pid the demo printed: synergyd, the agents, the job processes."""
        found = set()
        for line in self.lines:
            found.update(int(p) for m in re.finditer(r"pids? (\d+(?:,\d+)*)", line) for p in m.group(1).split(","))
        return found - {self.proc.pid}


def assert_nothing_left(demo: Demo, root: Path) -> None:
    alive = [pid for pid in demo.pids() if _alive(pid)]
    assert not alive, f"processes left running: {alive}\n{demo.output()}"
    mentions = [e.name for e in Path("/proc").iterdir() if e.name.isdigit() and str(root) in _cmdline(e)]
    assert not mentions, f"processes naming {root} left: {mentions}"
    assert not root.exists(), f"{root} was not removed"
    assert not cgroup_dirs(root.name), f"cgroups left: {cgroup_dirs(root.name)}"
    # The sweep is a backstop: the agents must have stopped their jobs and cgroups themselves.
    assert "left-over" not in demo.output(), demo.output()


def test_demo_runs_a_workload_to_the_end_and_summarises_every_job(tmp_path: Path) -> None:
    workload = tmp_path / "quick.yaml"
    workload.write_text(QUICK)
    demo = Demo(workload, "--deadline-s", "90", "--mechanisms", "tune")
    root = demo.root()
    code = demo.finish(timeout=150)
    out = demo.output()
    assert code == 0, out
    summary = out[out.index("Summary, Synergy-TUNE"):]
    for name in ("tiny-train", "tiny-cpu"):
        row = next((line for line in summary.splitlines() if f" {name} " in line), None)
        assert row is not None and "succeeded" in row, f"{name} missing from the summary:\n{out}"
    train_row = next(line for line in summary.splitlines() if " tiny-train " in line)
    assert re.search(r"CPU x\d", train_row), train_row  # its allocation against its proportional share
    assert re.search(r"total time \d+\.\d s", out)
    assert re.search(r"^dashboard: http://127\.0\.0\.1:\d+/\?token=\S+$", out, re.M), out  # `make demo` prints its URL
    assert "Comparison" not in out and "run 1 of" not in out, out  # one mechanism: the old behaviour
    assert demo.roots() == [root], out
    assert_nothing_left(demo, root)


def test_two_mechanisms_run_one_after_the_other_and_end_with_the_comparison(tmp_path: Path) -> None:
    workload = tmp_path / "quick.yaml"
    workload.write_text(QUICK)
    demo = Demo(workload, "--deadline-s", "90", "--mechanisms", "proportional,tune")
    code = demo.finish(timeout=240)
    out = demo.output()
    assert code == 0, out
    first, second = out.index("=== run 1 of 2: GPU-proportional"), out.index("=== run 2 of 2: Synergy-TUNE")
    assert first < out.index("Summary, GPU-proportional") < second < out.index("Summary, Synergy-TUNE"), out
    assert re.search(r"synergyd pid \d+, round 1 s, mechanism proportional", out[first:second]), out
    if os.geteuid() == 0 and Path("/sys/fs/cgroup/cpu").is_dir():  # each run weights its agents' cgroups
        # synergyd and the agents share the jobs' weight: unquota'd starting jobs (the agent's
        # start-up phase) under a weight 256 times theirs made their heartbeats 4-6 s late.
        assert len(re.findall(r"^the agents' cores go to the demo's jobs first \(a0 cpu.shares=262144, a1 "
                              r"cpu.shares=262144\); synergyd and the agents weighted alike$", out, re.M)) == 2, out
    table = out[out.index("Comparison"):]
    header = next(line for line in table.splitlines() if "GPU-proportional" in line and "Synergy-TUNE" in line)
    assert "RATIO tune" in header, table
    for row in ("tiny-train completion", "tiny-cpu completion", "makespan", "average JCT"):
        line = next((x for x in table.splitlines() if row in x), "")
        assert re.search(r"\d+\.\d s .* \d+\.\d s .* \d+\.\d\dx", line), f"{row!r} not compared:\n{table}"
    assert re.search(r"^Synergy-TUNE vs GPU-proportional, measured on this run: makespan \d+\.\d s -> \d+\.\d s "
                     r"\(\d+\.\d\dx\), average JCT \d+\.\d s -> \d+\.\d s \(\d+\.\d\dx\)$", out, re.M), out
    roots = demo.roots()
    assert len(roots) == 2 and roots[0] != roots[1], out
    for root in roots:
        assert_nothing_left(demo, root)


def test_under_proportional_a_job_is_not_profiled_and_every_training_job_gets_a_checkpoint_dir(
        tmp_path: Path) -> None:
    from demo import for_run
    from synergy.scheduler.cli.spec import parse_spec

    train = parse_spec({"name": "t", "command": ["python", "t.py"], "gpus": 1}, origin="test")
    assert for_run(train, tmp_path, "proportional").profiler == "none"
    assert for_run(train, tmp_path, "tune").profiler == train.profiler == ""
    assert for_run(train, tmp_path, "tune").checkpoint_dir == str(tmp_path / "t")
    chosen = parse_spec({"name": "c", "command": ["python", "t.py"], "gpus": 1, "profiler": "synergy",
                         "checkpoint_dir": "/ckpt"}, origin="test")
    assert for_run(chosen, tmp_path, "proportional") == chosen  # what the user chose stands


def _seen(name: str, state: str, submitted: float, finished: float) -> JobSeen:
    return JobSeen(hash(name) % 1000, name, "training", 1, state=state, submitted_at=submitted,
                   finished_at=finished)


def test_the_comparison_gives_the_baselines_time_over_the_other_and_refuses_unequal_sets() -> None:
    base = RunResult("proportional", [_seen("a", "succeeded", 100, 160), _seen("b", "succeeded", 100, 130)])
    tune = RunResult("tune", [_seen("a", "succeeded", 500, 540), _seen("b", "succeeded", 500, 530)])
    assert base.makespan(["a", "b"]) == 60 and tune.makespan(["a", "b"]) == 40
    assert base.mean_jct(["a", "b"]) == 45 and tune.mean_jct(["a", "b"]) == 35
    assert verdict([base, tune]) == [
        "Synergy-TUNE vs GPU-proportional, measured on this run: makespan 60.0 s -> 40.0 s (1.50x), "
        "average JCT 45.0 s -> 35.0 s (1.29x)"]
    failed = RunResult("tune", [_seen("a", "succeeded", 500, 540), _seen("b", "failed", 500, 510)])
    assert failed.makespan(["a", "b"]) is None and failed.mean_jct(["a", "b"]) is None
    assert verdict([base, failed]) == ["Synergy-TUNE vs GPU-proportional: no comparison, b did not succeed in both runs"]
    assert comparison_table([base, failed]).row_count == 4  # two jobs, makespan, average JCT


def test_ctrl_c_mid_run_stops_every_process_cgroup_and_temp_dir(tmp_path: Path) -> None:
    workload = tmp_path / "endless.yaml"
    workload.write_text(ENDLESS)
    demo = Demo(workload)
    root = demo.root()
    demo.wait_line(r"forever\s+running .* pid \d+", timeout=60)
    demo.wait_line(r"hog\s+running .* pid \d+", timeout=60)
    assert cgroup_dirs(root.name) or not Path("/sys/fs/cgroup").is_dir() or os.geteuid() != 0
    demo.proc.send_signal(signal.SIGINT)
    code = demo.finish(timeout=60)
    assert code == 128 + signal.SIGINT, demo.output()
    assert "run 2 of 2" not in demo.output(), demo.output()  # the default's second run never starts
    assert_nothing_left(demo, root)


def test_sigterm_while_starting_leaves_nothing(tmp_path: Path) -> None:
    workload = tmp_path / "endless.yaml"
    workload.write_text(ENDLESS)
    demo = Demo(workload)
    root = demo.root()
    demo.wait_line(r"^agent a1 pid \d+", timeout=30)  # agents started, not yet registered
    demo.proc.send_signal(signal.SIGTERM)
    code = demo.finish(timeout=60)
    assert code == 128 + signal.SIGTERM, demo.output()
    assert_nothing_left(demo, root)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _cmdline(entry: Path) -> str:
    try:
        return (entry / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_an_unknown_mechanism_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    before = set(Path(tempfile.gettempdir()).glob("synergy-demo-*"))
    proc = subprocess.run([sys.executable, str(DEMO), "--mechanisms", "proportional,fast"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines() == [
        "demo: --mechanisms: expected distinct names among proportional, greedy, tune, opt, comma-separated, "
        "got 'proportional,fast'"], proc.stdout + proc.stderr
    assert set(Path(tempfile.gettempdir()).glob("synergy-demo-*")) == before


def test_a_bad_workload_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    workload = tmp_path / "bad.yaml"
    workload.write_text("jobs:\n  - name: x\n    command: [python, t.py]\n    gpus: 0\n")
    before = set(Path(tempfile.gettempdir()).glob("synergy-demo-*"))
    proc = subprocess.run([sys.executable, str(DEMO), "--workload", str(workload)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines() == [f"demo: {workload}: jobs[0]: spec.gpus: must be at least 1, got 0"], (
        proc.stdout + proc.stderr)
    assert set(Path(tempfile.gettempdir()).glob("synergy-demo-*")) == before
