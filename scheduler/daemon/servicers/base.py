"""What all servicers share: mapping domain errors to status codes, and never crashing.

A servicer method wrapped with `@rpc` answers a DaemonError with its status code and the
error's one-line message (which names the field), counts it in the RPC-error metric, and
turns anything unexpected into INTERNAL with the traceback in the daemon's log only.

The server is grpc.aio: `@rpc` turns the plain method into the coroutine gRPC calls. The
logic it runs is short and in memory (a commit at most), so it runs on the event loop
directly; no thread hand-off per call.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from typing import Any, Callable, TypeVar

import grpc

from synergy.scheduler.daemon import errors
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.logs import event

CODES: dict[type[errors.DaemonError], grpc.StatusCode] = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
}

F = TypeVar("F", bound=Callable[..., Any])


class Servicer:
    def __init__(self, ctx: DaemonContext) -> None:
        self.ctx = ctx


def rpc(method: F) -> F:
    @functools.wraps(method)
    async def wrapper(self: Servicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except errors.DaemonError as exc:
            code = CODES.get(type(exc), grpc.StatusCode.UNKNOWN)
            message = str(exc)
        except sqlite3.Error as exc:
            code, message = grpc.StatusCode.UNAVAILABLE, f"state store unavailable ({exc}); retry"
            event(self.ctx.log, "rpc.store_error", logging.ERROR, exc_info=True, method=method.__name__)
        except Exception:  # noqa: BLE001 (a bad request must never take the daemon down)
            code, message = grpc.StatusCode.INTERNAL, "internal error; see the synergyd log"
            event(self.ctx.log, "rpc.internal_error", logging.ERROR, exc_info=True, method=method.__name__)
        self.ctx.metrics.rpc_errors.labels(method.__name__, code.name).inc()
        await context.abort(code, message)

    return wrapper  # type: ignore[return-value]
