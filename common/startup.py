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
it does nothing.
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
#: The longest the job waits for the answer (the agent answers at its next wake-up: milliseconds).
ACK_TIMEOUT_S = 10.0


def env_value(fd: int) -> str:
    """The variable's value for the job's end `fd`."""
    return f"{fd}:{os.fstat(fd).st_ino}"


def reached_training_loop(environ: Mapping[str, str] | None = None, timeout_s: float = ACK_TIMEOUT_S) -> str:
    """Tell the agent, wait for its answer, close the socket; what happened, in words.

    "" when there is no start-up phase to end (no variable: it is taken out, so children and
    later calls find none). Never raises: a job must not fail over its CPU quota.
    """
    env = os.environ if environ is None else environ
    value = env.get(STARTUP_FD, "")
    if isinstance(env, MutableMapping):
        env.pop(STARTUP_FD, None)
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
        return f"the agent did not answer within {timeout_s:g} s: going on"
    except OSError as exc:  # the agent restarted: its successor applied the quota when it took the task
        return f"the agent's end is gone ({exc.strerror or exc}): going on"
    finally:
        sock.close()
    if answer != APPLIED:
        return "the agent closed its end without answering: going on"
    return "start-up over: the agent applied the CPU quota"
