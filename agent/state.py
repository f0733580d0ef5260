"""The agent's state file and process identity: what a restarted agent needs to re-adopt tasks.

`WORK_DIR/state.json` lists the tasks the agent supervises (never the job token: the
file holds only what re-adoption needs). It is rewritten atomically (temp file, fsync,
rename) whenever a task changes, so a `kill -9` at any instant leaves either the old or
the new list. A pid alone does not identify a process across a restart (pids are reused),
so each is recorded with its start time in clock ticks since boot (`/proc/PID/stat`
field 22), and re-adoption also checks the task's cgroup membership (`cgroup.procs`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from synergy.common.files import TEMP_PREFIX, write_atomically

STATE_FILE = "state.json"
EXITS_DIR = "exits"
FORMAT_VERSION = 1


def save(path: Path, node_id: str, records: list[dict[str, Any]]) -> None:
    """Rewrite the state file atomically. The directory is not fsynced (`sync_dir=False`):
    the rename is what matters after an agent crash (the tasks outlive the agent, not the
    machine), and the fsync would double the cost of every launch."""
    body = {"version": FORMAT_VERSION, "node_id": node_id, "tasks": records}
    write_atomically(path, json.dumps(body, indent=1, sort_keys=True).encode(), sync_dir=False)


def remove_stale_temp_files(path: Path) -> None:
    """Temp files of the state file that a crash during a write left (never the only copy)."""
    for tmp in path.parent.glob(f"{TEMP_PREFIX}{path.name}.*"):
        tmp.unlink(missing_ok=True)


def load(path: Path, node_id: str) -> tuple[list[dict[str, Any]], str]:
    """The task records of a previous instance, and a problem to log ("" when none)."""
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        return [], ""
    except (OSError, ValueError) as exc:
        return [], f"cannot read {path}: {exc}"
    if not isinstance(body, dict) or body.get("version") != FORMAT_VERSION:
        return [], f"{path}: unknown format"
    if body.get("node_id") != node_id:
        return [], f"{path} belongs to node {body.get('node_id')!r}, not {node_id!r}"
    tasks = body.get("tasks")
    return (tasks if isinstance(tasks, list) else []), ""


def start_ticks(pid: int) -> int:
    """The process's start time (clock ticks since boot); 0 when there is no such live process."""
    if pid <= 0:
        return 0
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # a zombie has ended: only its parent's reaping is left
        return 0
    return int(fields[19])


def same_process(pid: int, ticks: int) -> bool:
    """Is `pid` still the process that started at `ticks` (not ended, not a reused pid)?"""
    return ticks > 0 and start_ticks(pid) == ticks


def read_exit(path: Path) -> int | None:
    """The exit code the shim recorded (its first line), or None when it has not (yet)."""
    try:
        return int(path.read_text().split("\n", 1)[0].strip())
    except (OSError, ValueError):
        return None


def read_exit_note(path: Path) -> str:
    """What the shim noted beside the code (e.g. output it had to drop); "" when nothing."""
    try:
        return path.read_text().split("\n", 1)[1].strip() if path.exists() else ""
    except (OSError, IndexError):
        return ""
