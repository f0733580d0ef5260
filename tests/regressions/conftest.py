"""Fixtures for regression tests: the same as tests/daemon/conftest.py and tests/cli/conftest.py
(a real synergyd per call, fake agents, the CLI in-process), with SYNERGY_* cleared."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
from synergyd_harness import DaemonProcess, FakeAgent


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    started: list[DaemonProcess] = []

    def start(*extra: str, state_dir: Path | None = None, round_s: float = 0.5) -> DaemonProcess:
        d = DaemonProcess(state_dir or tmp_path / f"state{len(started)}", *extra, round_s=round_s)
        started.append(d)
        return d.start()

    yield start
    for d in started:
        d.kill()


@pytest.fixture
def start_agent() -> Iterator[Callable[..., FakeAgent]]:
    agents: list[FakeAgent] = []

    def start(daemon: DaemonProcess, node_id: str, **kw: object) -> FakeAgent:
        a = FakeAgent(daemon.address, daemon.cluster_token, node_id, **kw)  # type: ignore[arg-type]
        agents.append(a)
        return a.start()

    yield start
    for a in agents:
        a.stop()


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The developer's own SYNERGY_* settings must not leak into the tests."""
    for name in list(os.environ):
        if name.startswith("SYNERGY_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("COLUMNS", "200")


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """`cli(daemon, ARGS...)`: `synergy ARGS...` in-process against `daemon` (via --state-dir)."""
    from synergy.scheduler.cli.main import main

    def run(daemon: DaemonProcess, *args: str) -> Run:
        capsys.readouterr()
        code = main(["--state-dir", str(daemon.state_dir), *args])
        captured = capsys.readouterr()
        return Run(int(code), captured.out, captured.err)

    return run
