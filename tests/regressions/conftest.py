"""Fixtures: every daemon and agent a test starts is stopped by a finaliser, even on failure."""

from __future__ import annotations

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
