"""The start-up handshake: a job's process tells its agent it reached its training loop.

Why (issue 14): a job's process start-up (the interpreter, `import torch`, building the model:
6-9 s of CPU) used to run under the task's CFS quota. A light job given a quarter of a core
started 2-4x slower than at its GPU-proportional share, a large part of a minute-long JCT. So
the agent runs each task's start-up without a quota (its cpuset and its CFS weight, which is
proportional to its allocation, stay: every contending task still gets at least its own
allocation, the starter takes what nobody uses) and applies the quota once the job says it
has reached its training loop (agent/startup.py holds the agent's half; docs/agent.md
"The start-up phase").

The words: at launch the agent makes a Unix socket pair; the job's process inherits one end,
named by `SYNERGY_STARTUP_FD` = "FD:INODE" (the inode proves the descriptor is that socket and
not a number some child process reused). `reached_training_loop` (the `SynergyIterator` calls
it when its loop starts) sends `STARTED` and waits for `APPLIED`, which the agent sends only
once the quota is written: nothing after it (the wrap's profiling windows above all) measures
a process that runs beyond its allocation. The wait is bounded (`ACK_TIMEOUT_S`): a busy agent
costs the job at most that, a restarted one (its end closed) nothing. Any process may call it, once;
a process the agent did not start this way (standalone, Slurm, a child) finds no variable and
it does nothing. The wrap keeps the socket after the answer (`JobLine`) and says `WINDING_DOWN`
at exit: the agent lifts the quota for the teardown (the wind-down, docs/agent.md).
"""

from __future__ import annotations

import os
import socket
import stat
from typing import Mapping, MutableMapping

from synergy.common.contract import STARTUP_FD

#: The job's message (its training loop is reached) and the agent's answer (the quota is in force).
STARTED = b"S"
APPLIED = b"A"
#: The job's last word: its process is exiting (`JobLine.winding_down`).
WINDING_DOWN = b"W"
#: The longest the job waits for the answer (the agent answers at its next wake-up: milliseconds).
ACK_TIMEOUT_S = 10.0


def env_value(fd: int) -> str:
    """The variable's value for the job's end `fd`."""
    return f"{fd}:{os.fstat(fd).st_ino}"


class JobLine:
    """The job's end of its start-up socket, for the process's two words: its training loop is
    reached (the agent applies the quota and answers), and, at exit, it is winding down (the
    agent lifts the quota again for the interpreter's teardown, answering nothing).

    Why the second word (issue 14): a finished job's process tears torch down (0.6-1 s of CPU,
    its DataLoader workers' too) under its quota; at a quarter of a core that took 3.4 s, and
    the node's next launch waits for the exit (its GPUs are still held). Without a quota the
    teardown takes what nobody else uses; its CFS weight still keeps every neighbour at its
    allocation. The agent caps that phase (agent/startup.py).

    Never raises: a job must not fail over its CPU quota. Without the variable (standalone,
    Slurm, a child process) both words do nothing.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._value = env.get(STARTUP_FD, "")
        if isinstance(env, MutableMapping):
            env.pop(STARTUP_FD, None)  # children and later lines find none
        self._sock: socket.socket | None = None

    def reached_training_loop(self, timeout_s: float = ACK_TIMEOUT_S) -> str:
        """Tell the agent, wait for its answer; what happened, in words ("" without a line).
        On an answer the socket stays open for `winding_down`; otherwise it is closed."""
        value, self._value = self._value, ""
        if not value:
            return ""
        fd_text, _, ino_text = value.partition(":")
        try:
            fd, ino = int(fd_text), int(ino_text)
            st = os.fstat(fd)
        except (ValueError, OSError):
            return f"{STARTUP_FD}={value!r} names no open descriptor here: the agent's quota comes at its cap"
        if not stat.S_ISSOCK(st.st_mode) or st.st_ino != ino:
            return f"{STARTUP_FD}={value!r} is not this process's start-up socket: the agent's quota comes at its cap"
        sock = socket.socket(fileno=fd)
        try:
            sock.settimeout(timeout_s)
            sock.sendall(STARTED, socket.MSG_NOSIGNAL)
            answer = sock.recv(1)
        except socket.timeout:
            sock.close()
            return f"the agent did not answer within {timeout_s:g} s: going on"
        except OSError as exc:  # the agent restarted: its successor applied the quota when it took the task
            sock.close()
            return f"the agent's end is gone ({exc.strerror or exc}): going on"
        if answer != APPLIED:
            sock.close()
            return "the agent closed its end without answering: going on"
        self._sock = sock
        return "start-up over: the agent applied the CPU quota"

    def winding_down(self) -> bool:
        """Tell the agent the process is exiting (no answer awaited), close the line; whether
        it was told (False: no line, or the agent's end is gone)."""
        sock, self._sock = self._sock, None
        if sock is None:
            return False
        try:
            sock.send(WINDING_DOWN, socket.MSG_NOSIGNAL)
            return True
        except OSError:
            return False
        finally:
            sock.close()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


def reached_training_loop(environ: Mapping[str, str] | None = None, timeout_s: float = ACK_TIMEOUT_S) -> str:
    """`JobLine.reached_training_loop` for a process with nothing more to say: the line is
    closed after (the agent then never hears it wind down)."""
    line = JobLine(environ)
    try:
        return line.reached_training_loop(timeout_s)
    finally:
        line.close()
