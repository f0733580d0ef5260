"""Domain errors raised by the daemon's logic; servicers map each to one gRPC status code.

The logic never imports grpc: these exceptions are its whole vocabulary for "no".
"""

from __future__ import annotations


class DaemonError(Exception):
    """Base class; `str(exc)` is the one-line message the caller sees."""


class InvalidArgument(DaemonError):
    """A request field is malformed; the message starts with the field's name."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


class NotFound(DaemonError):
    pass


class AlreadyExists(DaemonError):
    pass


class PermissionDenied(DaemonError):
    pass


class FailedPrecondition(DaemonError):
    """The request is well-formed but the target's state does not allow it."""
