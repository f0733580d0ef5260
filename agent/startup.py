"""A task's start-up phase, the agent's half (the job's half and the why: synergy.common.startup).

From launch until its job says it reached its training loop, a task's cgroup has no CFS quota;
its cpuset (its own cores and the shared pool) and its CFS weight (cpu.shares, proportional to
its allocation: `Supervisor._limits`) stay. The phase ends at the first of: the job's `STARTED`
on its socket (the agent applies the quota, then answers `APPLIED`), the job closing its end,
`STARTUP_CAP_S` after the launch (a job that never says it: no wrap, not Python), the task's
exit, and an agent restart (the socket went with the old agent: the successor applies the
quota when it re-adopts the task). The supervisor keeps the books (agent/tasks.py); this
module holds the socket and the clock of one phase.

After the answer the agent keeps its end as the task's `Line`: the job's last word on it is
that its process is exiting (`WINDING_DOWN`, said by the wrap at exit). The quota is lifted
again for the interpreter's teardown (the wind-down), at most `WIND_DOWN_CAP_S`, and the
task's weight stays its allocation: the next task launched on its GPUs waits for that exit.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from synergy.common.startup import APPLIED, STARTED, WINDING_DOWN

#: The longest a task runs without its CPU quota (seconds since launch), signal or not.
STARTUP_CAP_S = 120.0
#: The longest a task runs without its CPU quota once its job said it is winding down.
WIND_DOWN_CAP_S = 30.0


@dataclass
class Startup:
    """One task's start-up phase: the agent's end of its socket and when the cap ends it."""

    #: monotonic time the cap ends the phase (inf: re-adopted, ended by `readopt` at once)
    deadline: float
    #: the agent's end (None: re-adopted from the state file, the socket went with the old agent)
    sock: socket.socket | None = None

    @classmethod
    def open(cls, now: float, cap_s: float) -> tuple[Startup, int]:
        """A new phase and the job's end of its socket (a descriptor the caller passes on and closes)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        mine.setblocking(False)
        return cls(now + cap_s, mine), theirs.detach()

    @classmethod
    def readopted(cls) -> Startup:
        return cls(float("inf"))

    def fileno(self) -> int | None:
        return self.sock.fileno() if self.sock is not None else None

    def heard(self) -> str:
        """Why the job's side ends the phase now ("" = nothing yet); never blocks."""
        if self.sock is None:
            return ""
        try:
            data = self.sock.recv(16)
        except (BlockingIOError, InterruptedError):
            return ""
        except OSError as exc:
            return f"its start-up socket failed ({exc.strerror or exc})"
        if not data:
            return "its job closed its start-up socket without a word"
        if STARTED in data:
            return "its job reached its training loop"
        return f"its job sent {data!r} on its start-up socket"

    def answer(self) -> Line:
        """Tell the job its quota is in force; the agent's end becomes the task's `Line`."""
        sock, self.sock = self.sock, None
        if sock is None:
            return Line(None)
        try:
            sock.send(APPLIED, socket.MSG_NOSIGNAL)
        except OSError:  # the job is gone, or gave up waiting
            sock.close()
            return Line(None)
        return Line(sock)

    def close(self, answer: bool) -> None:
        """Close the agent's end; with `answer`, first tell the job its quota is in force."""
        sock, self.sock = self.sock, None
        if sock is None:
            return
        if answer:
            try:
                sock.send(APPLIED, socket.MSG_NOSIGNAL)
            except OSError:
                pass  # the job is gone, or gave up waiting
        sock.close()


@dataclass
class Line:
    """The agent's end of a task's socket after its start-up phase, heard for one word."""

    sock: socket.socket | None

    def fileno(self) -> int | None:
        return self.sock.fileno() if self.sock is not None else None

    def winding_down(self) -> bool:
        """Whether the job said its process is exiting; never blocks. The line closes when it
        has, and on the job's close or an error (nothing more will come)."""
        if self.sock is None:
            return False
        try:
            data = self.sock.recv(16)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            data = b""
        if data and WINDING_DOWN not in data:
            return False  # a late STARTED (the cap had ended the phase): already answered
        self.close()
        return bool(data)

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
