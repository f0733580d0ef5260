"""The one exception the simulator raises for bad user input.

Everything a user can get wrong (a flag, a trace row, a profile file) surfaces as a
`SimInputError` whose message names the flag, file, row or field; the CLI prints it as one
line and exits 2. Anything else escaping is a bug, and a traceback is the right signal.
"""
from __future__ import annotations


class SimInputError(ValueError):
    """Bad simulator input; the message is one line that names what to fix."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
