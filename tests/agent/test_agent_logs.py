"""`synergy logs` end to end: a real synergyd, a real synergy-agent, a real job writing output;
the CLI (in-process) gets it relayed on heartbeats, with --lines, --rank and -f."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent_harness import AgentProcess, is_root_with_v1
from synergyd_harness import DaemonProcess, wait_for
from synergy.scheduler.cli.main import main
from synergy.v1 import admin_pb2

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the cgroup layer is unit-tested without")

CHATTY = "import time\nfor i in range(1, 41): print('line', i, flush=True)\ntime.sleep(600)"
SLOW = ("import time\nfor i in range(1, 8):\n    print('tick', i, flush=True); time.sleep(0.4)\n"
        "print('done ticking', flush=True)")


def _cli(capsys: pytest.CaptureFixture[str], d: DaemonProcess, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--state-dir", str(d.state_dir), *args])
    out = capsys.readouterr()
    return int(code), out.out, out.err


def test_logs_tail_rank_and_follow(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600").start()
    agent = AgentProcess(d, tmp_path / "work", "logs0", "--cpus", "0", "--memory", "1G", fake_gpus=2)
    admin = d.admin()
    try:
        agent.start()
        py = (sys.executable, "-u", "-c")
        chatty = admin.submit("chatty", gpus=1, command=py + (CHATTY,), working_dir=str(tmp_path)).id
        wait_for(lambda: "line 40" in agent.task_log(chatty), timeout=60, what="the job to print 40 lines")
        code, out, err = _cli(capsys, d, "logs", "chatty", "--lines", "3")
        assert code == 0, err
        assert out.split() == ["line", "38", "line", "39", "line", "40"], out
        code, out, err = _cli(capsys, d, "logs", str(chatty), "--rank", "3")
        assert code == 1 and "rank" in err and "Traceback" not in err, (code, err)
        code, out, err = _cli(capsys, d, "logs", "chatty", "--lines", "0")
        assert code == 2 and "--lines" in err
        admin.CancelJob(admin_pb2.CancelJobRequest(job=str(chatty)))  # frees the node's one CPU
        # -f: every line of a job that is still writing, then the stream ends when it exits.
        slow = admin.submit("slow", gpus=1, command=py + (SLOW,), working_dir=str(tmp_path)).id
        wait_for(lambda: "tick 1" in agent.task_log(slow), timeout=60, what="the slow job to start")
        code, out, err = _cli(capsys, d, "logs", "slow", "-f", "--lines", "100")
        assert code == 0, err
        assert [f"tick {i}" for i in range(1, 8)] + ["done ticking"] == [x for x in out.splitlines() if x], out
    finally:
        admin.close()
        agent.stop()
        d.kill()


# ~1.5 MB/s of numbered lines for 6 s, then a last line; the task lives on.
FAST = ("import sys, time\nline = 'y' * 1000\nt0 = time.monotonic(); i = 0\n"
        "while time.monotonic() - t0 < 6:\n"
        "    for _ in range(150):\n        i += 1; sys.stdout.write(f'{i} {line}\\n')\n"
        "    sys.stdout.flush(); time.sleep(0.1)\n"
        "print('LAST LINE', i, flush=True)\ntime.sleep(600)")


def test_a_tail_is_answered_from_the_end_of_the_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15 (5): `synergy logs J -n 1` every few seconds of a 1.5 MB/s job showed lines
    15-20 s old, still after the job printed its last line (a buffer advancing 64 KiB per heartbeat)."""
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600").start()
    agent = AgentProcess(d, tmp_path / "work", "fast0", "--cpus", "0", "--memory", "1G", "--sample-interval-s", "0")
    admin = d.admin()
    try:
        agent.start()
        job = admin.submit("fast", gpus=1, command=(sys.executable, "-u", "-c", FAST), working_dir=str(tmp_path)).id
        wait_for(lambda: agent.task_log(job), timeout=60, what="the job to start printing")
        while "LAST LINE" not in agent.task_log(job):  # a reader polling while the job floods
            code, out, err = _cli(capsys, d, "logs", str(job), "--lines", "1")
            assert code == 0, err
        last = [x for x in agent.task_log(job).splitlines() if x.startswith("LAST LINE")][0]
        code, out, err = _cli(capsys, d, "logs", str(job), "--lines", "1")
        assert code == 0 and out.strip() == last, (out[:200], last)
    finally:
        admin.close()
        agent.stop()
        d.kill()
