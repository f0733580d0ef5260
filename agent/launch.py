"""Starting a task's process: the executable, the shim's pid report, affinity without cgroups.

The pieces of a LAUNCH that talk to the OS (tasks.py decides what to launch and where).
Bad input becomes a `LaunchError` whose message is the task's exit message.
"""

from __future__ import annotations

import os
import select
import shutil
import time
from pathlib import Path

#: The shim that parents every job and records its exit status (see shim.py for why).
SHIM = str(Path(__file__).with_name("shim.py"))
#: How long a launch waits for the shim to report the job's pid.
SHIM_START_TIMEOUT_S = 10.0


class LaunchError(RuntimeError):
    """Why a LAUNCH could not be carried out (becomes the task's exit message)."""


def resolve(command: str, workdir: Path, path_var: str) -> str:
    """The executable the job's argv[0] names (checked here, so a bad command gets a clear message)."""
    if "/" in command:
        found: str | None = str(workdir / command)
        if not os.path.exists(found):
            found = None
    else:
        found = shutil.which(command, mode=os.F_OK, path=path_var)
        if found is not None:
            found = str(workdir / found)
    if found is None:
        raise LaunchError(f"task.command: {command!r} not found (working dir {workdir})")
    if not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise LaunchError(f"task.command: {command!r} is not executable")
    return found


def read_pid(fd: int, timeout_s: float) -> int:
    """The job's pid, as the shim writes it on the pipe; 0 when it does not within the timeout."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return 0
        chunk = os.read(fd, 4096)
        if not chunk:
            return 0
        data += chunk
    if data.startswith(b"ERR "):
        raise LaunchError(data[4:].decode(errors="replace").strip())
    return int(data)


def pin_tree(pid: int, cores: tuple[int, ...]) -> None:
    """Affinity of every thread of a process tree (the fallback when no cpuset enforces it)."""
    if not pid:
        return
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        try:
            for t in p.threads():
                os.sched_setaffinity(t.id, set(cores))
        except (psutil.Error, OSError):
            continue
