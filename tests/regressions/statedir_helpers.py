"""Helpers of the state-dir regression tests: refused starts, and damaging a database on purpose.

`run_synergyd` runs the daemon expecting a refusal; a start that succeeds instead is stopped
at once (SIGTERM) and reported, so a regression shows up as a failed assertion, never as a
hung test.
"""

from __future__ import annotations

import os
import queue
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Outcome:
    code: int
    started: bool
    stderr: str


def run_synergyd(state_dir: Path, *flags: str, timeout: float = 60.0) -> Outcome:
    argv = [sys.executable, "-X", "faulthandler", "-m", "synergy.scheduler.daemon.main", "--state-dir", str(state_dir), "--port", "0",
            "--round-s", "1", *flags]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
        try:
            started = lines.get(timeout=timeout).startswith("synergyd listening on ")
        except queue.Empty:
            started = False
        if started or proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            # A daemon that does not stop on SIGTERM is a defect of its own: say where every
            # thread was (faulthandler prints them on SIGABRT) instead of only "timed out".
            proc.send_signal(signal.SIGABRT)
            proc.wait(timeout=30)
            err.seek(0)
            raise AssertionError(f"synergyd (started={started}) did not stop within 60 s of SIGTERM; "
                                 f"its stderr and thread stacks:\n{err.read()}") from None
        proc.stdout.close()  # type: ignore[union-attr]
        err.seek(0)
        return Outcome(code, started, err.read())


def assert_refused(outcome: Outcome, code: int, *words: str) -> str:
    """Refused with exit `code`, one line on stderr naming `words`, no traceback; returns the line."""
    assert not outcome.started, f"synergyd started instead of refusing; stderr:\n{outcome.stderr}"
    assert "Traceback" not in outcome.stderr, outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("synergyd: "), outcome.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert outcome.code == code, (outcome.code, outcome.stderr)
    return lines[0]


def root_pages(db: Path) -> dict[str, int]:
    """Table and index name -> its b-tree's root page number (1-based)."""
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute("SELECT name, rootpage FROM sqlite_master WHERE rootpage > 0"))
    finally:
        conn.close()


def corrupt_page(db: Path, page: int) -> None:
    """Write random bytes over one whole page (1-based), as a failing disk or a stray write would."""
    conn = sqlite3.connect(db)
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(db, "r+b") as f:
        f.seek(size * (page - 1))
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
