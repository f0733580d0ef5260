"""How a managed job process ended, in the one line its `ReportCompletion` carries.

The daemon shows the line as the job's reason in `synergy describe`, so it must be a single
line and never a traceback, whatever the script raised or exited with.
"""

from __future__ import annotations

import re

#: A traceback's last line: the exception's type and message ("FileNotFoundError: [Errno 2] ...").
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b.*:")


def exception_line(tp: type[BaseException], value: BaseException) -> str:
    """One line for an uncaught exception.

    Most messages are one line already. A DataLoader worker's exception is re-raised in the
    training process with the worker's whole traceback as its message ("Caught X in
    DataLoader worker process 0.\\nOriginal Traceback ...\\nX: what happened"): its last line
    says what happened and its first line where, so the line is "last (first)".
    """
    lines = [line.strip() for line in str(value).splitlines() if line.strip()]
    if not lines:
        return tp.__name__
    last = lines[-1] if _EXCEPTION_LINE.match(lines[-1]) else f"{tp.__name__}: {lines[-1]}"
    if len(lines) == 1:
        return last
    return f"{last} ({lines[0].rstrip('.')})"


def exit_failure(code: object) -> str:
    """The failure a `sys.exit(code)` means ("" for a successful exit), in sys.exit's own terms:
    None and 0 succeed, another int is the exit code, anything else is printed and exits 1."""
    if code is None or code == 0:
        return ""
    if isinstance(code, int):
        return f"the script exited with exit code {code}"
    text = " ".join(str(code).split())
    return f"the script exited with exit code 1: {text}"
