"""Import boundaries (issue 15, structure): what each process loads is part of its contract.

* a training process (`synergy.iterator`) loads no agent and no daemon module: what it
  shares with the agent (the environment contract, the channel and its back-off) lives in
  `synergy.common`; it loaded the agent's supervisor, telemetry and psutil through
  `agent/client.py` before;
* synergy-agent loads no daemon and no CLI module: its structured logs, TLS probe, task
  keys, atomic writes and locks are `synergy.common`'s. (The CLI package sets GRPC_VERBOSITY=NONE when it loads, which the
  agent then handed to every job, hiding gRPC's own errors from them.)
* the scheduling core loads neither grpc nor sqlite3 (it is pure: the daemon and the
  simulator are shells around it);
* the CLI loads no scipy (its start-up time is every command's: the core's matchings import
  it where they run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def _loaded_by(module: str) -> set[str]:
    """Modules that importing `module` adds, in a fresh interpreter."""
    code = (f"import json, sys; before = set(sys.modules); import {module}; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout))


def _under(loaded: set[str], *packages: str) -> set[str]:
    return {m for m in loaded if any(m == p or m.startswith(p + ".") for p in packages)}


def test_the_iterator_loads_no_agent_and_no_daemon_module() -> None:
    loaded = _loaded_by("synergy.iterator")
    assert not _under(loaded, "synergy.agent", "synergy.scheduler.daemon", "synergy.scheduler.cli")
    assert "psutil" not in loaded
    assert {"synergy.common.contract", "synergy.common.channel"} <= loaded


def test_the_agent_loads_no_daemon_and_no_cli_module() -> None:
    loaded = _loaded_by("synergy.agent.main")
    assert not _under(loaded, "synergy.scheduler.daemon", "synergy.scheduler.cli")
    # of the scheduler, only the state dir's file names and the GPU type rule
    assert _under(loaded, "synergy.scheduler") <= {"synergy.scheduler", "synergy.scheduler.statedir",
                                                   "synergy.scheduler.gpu_type_names"}
    assert {"synergy.common.logs", "synergy.common.tasks", "synergy.common.files"} <= loaded


def test_the_agent_leaves_grpc_verbosity_to_its_user() -> None:
    """The agent's environment is every job's: nothing it loads may set gRPC's settings."""
    code = "import os, synergy.agent.main; print(os.environ.get('GRPC_VERBOSITY', '-'))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                         env=env)
    assert out.stdout.strip() == "-"


@pytest.mark.parametrize("forbidden", ["grpc", "sqlite3"])
def test_the_core_loads_no_io_module(forbidden: str) -> None:
    assert forbidden not in _loaded_by("synergy.scheduler.core")


def test_the_cli_loads_no_scipy() -> None:
    assert not _under(_loaded_by("synergy.scheduler.cli.main"), "scipy")
