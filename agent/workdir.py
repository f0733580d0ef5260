"""Is the work dir too full to take new tasks? (Issue 15: a full work dir made a black hole.)

Task logs, exit records and the state file all live in `--work-dir`. When it fills up, a
new task would start with nowhere to write, so the agent tells the daemon the node is not
ready (`HeartbeatRequest.not_ready_reason`, shown as cordoned with the reason) until space
comes back. Running tasks go on: their logs are capped and rotated by the shim, and their
exit records were reserved before they started.
"""

from __future__ import annotations

import os
from pathlib import Path

MIB = 1024**2
#: the threshold is at most this fraction of the filesystem (a small tmpfs is not "always full")
MAX_FRACTION = 0.1


def work_dir_problem(work_dir: Path, min_free_bytes: int) -> str:
    """Why the work dir cannot take new tasks ("" when it can)."""
    if min_free_bytes <= 0:
        return ""
    try:
        st = os.statvfs(work_dir)
    except OSError as exc:
        return f"work dir {work_dir} cannot be read: {exc.strerror or exc}"
    free, size = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    need = min(min_free_bytes, int(size * MAX_FRACTION))
    if free >= need:
        return ""
    return (f"work dir {work_dir} is full: {free / MIB:.1f} MiB free, below {need / MIB:.1f} MiB "
            "(--work-dir-min-free); running tasks go on, new ones wait")
