"""Shared test set-up. Its presence puts tests/ on sys.path (pytest's default import mode),
so every test folder can import the shared helpers beside it: `synergyd_harness` (a real
synergyd process and simulated agents), `cli_runner` (the CLI in-process) and
`profiles_for_tests`.

The fixtures here serve every folder: each daemon and fake agent a test starts is stopped
by a finaliser, even on failure, and no test sees the developer's own SYNERGY_* settings or
default state dir."""

from __future__ import annotations

import os
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Callable, Iterator

import pytest
from synergyd_harness import DaemonProcess, FakeAgent

from synergy.common import tasks
from synergy.scheduler import model
from synergy.scheduler.daemon import leases, live

#: Every value object (synergy.common.values), by the modules that define them.
VALUE_TYPES = model.VALUE_TYPES + tasks.VALUE_TYPES + live.VALUE_TYPES + leases.VALUE_TYPES


def _write_once(self: object, name: str, value: object) -> None:
    """A value object's attribute may be set while it is built, never again."""
    try:
        getattr(self, name)
    except AttributeError:
        object.__setattr__(self, name, value)
        return
    raise FrozenInstanceError(f"cannot assign to field {name!r} of a {type(self).__name__}")


def _no_delete(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r} of a {type(self).__name__}")


def pytest_configure(config: pytest.Config) -> None:
    """Value objects are not frozen dataclasses at run time (a frozen one takes three times
    the instructions to build, synergy.common.values): under test they are write-once, so
    code that assigns to one fails here as it would with `frozen=True`."""
    for cls in VALUE_TYPES:
        cls.__setattr__ = _write_once  # type: ignore[method-assign,assignment]
        cls.__delattr__ = _no_delete  # type: ignore[method-assign,assignment]


#: gRPC's settings as pytest started, before test modules were imported: importing the CLI
#: sets GRPC_VERBOSITY=NONE and importing synergy.iterator gRPC's fork settings, for the
#: whole process. A process a test starts (synergyd, an agent, a job) inherits them, so what
#: it printed depended on which test modules happened to be collected with it.
GRPC_AT_START = {k: v for k, v in os.environ.items() if k.startswith("GRPC_")}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("SYNERGY_"):
            monkeypatch.delenv(name)
        elif name.startswith("GRPC_") and name not in GRPC_AT_START:
            monkeypatch.delenv(name)
    for name, value in GRPC_AT_START.items():
        monkeypatch.setenv(name, value)
    # Keep the default state dir (~/.local/state/synergy) out of reach too.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("COLUMNS", "200")


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


#: Words of the skip reason every real-cgroup end-to-end test gives (agent_harness.is_root_with_v1).
CGROUP_SKIP = "needs root and cgroup v1"
#: A keyword on those tests' reports (keywords travel from xdist workers; the stash does not).
CGROUP_KEYWORD = "real_cgroup"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(CGROUP_SKIP in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")):
            item.keywords[CGROUP_KEYWORD] = True


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Say how many end-to-end tests that need root and cgroup v1 ran and how many were skipped
    (issue 15: a CI without root would pass with every one of them skipped, silently), and
    that tests/slurm did not run where Slurm cannot (its conftest leaves them uncollected)."""
    from slurm.slurm_cluster import missing  # tests/slurm/slurm_cluster.py

    if missing():
        terminalreporter.write_line(f"Slurm tests (tests/slurm) not run: {missing()}")
    # A module skipped whole at collection (the browser tests without chromium) reports a
    # CollectReport, which has no keywords.
    ran = {r.nodeid for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])
           if r.when == "call" and CGROUP_KEYWORD in getattr(r, "keywords", ())}
    skipped = {r.nodeid for r in terminalreporter.stats.get("skipped", [])
               if CGROUP_KEYWORD in getattr(r, "keywords", ())}
    if not ran and not skipped:
        return
    terminalreporter.write_line(f"real-cgroup end-to-end tests: {len(ran)} ran, {len(skipped)} skipped"
                                + (f" ({CGROUP_SKIP})" if skipped else ""))
