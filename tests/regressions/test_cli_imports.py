"""The CLI must not pull in the daemon (its SQLite store, reconciler, metrics) to talk to it.

(`sqlite3` itself may load: `synergy admin restore` checks a backup file offline.)"""

from __future__ import annotations

import json
import subprocess
import sys

#: The state-dir layout the CLI reads lives in synergy.scheduler.statedir, outside the daemon.
ALLOWED: set[str] = set()


def test_cli_imports_no_daemon_module() -> None:
    code = (
        "import json, sys; import synergy.scheduler.cli.main; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('synergy.scheduler.daemon'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    loaded = set(json.loads(out.stdout))
    assert loaded <= ALLOWED, sorted(loaded - ALLOWED)
