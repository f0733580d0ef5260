"""The CLI must not pull in the daemon (its SQLite store, reconciler, metrics) to talk to it."""

from __future__ import annotations

import json
import subprocess
import sys

#: Allowed: the daemon package itself, and statedir (where the CLI finds the address and token).
ALLOWED = {"synergy.scheduler.daemon", "synergy.scheduler.daemon.statedir"}


def test_cli_imports_no_daemon_internals_and_no_sqlite() -> None:
    code = (
        "import json, sys; import synergy.scheduler.cli.main; "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'sqlite3' or m.startswith('_sqlite3') "
        "or m.startswith('synergy.scheduler.daemon'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    loaded = set(json.loads(out.stdout))
    assert "sqlite3" not in loaded and "_sqlite3" not in loaded, sorted(loaded)
    assert loaded <= ALLOWED, sorted(loaded - ALLOWED)
