"""What all servicers share: mapping domain errors to status codes, and never crashing.

A servicer method wrapped with `@rpc` answers a DaemonError with its status code and the
error's one-line message (which names the field), counts it in the RPC-error metric, and
turns anything unexpected into INTERNAL with the traceback in the daemon's log only.

The server is grpc.aio: `@rpc` turns the plain method into the coroutine gRPC calls. Most
handlers take the daemon's state lock, which a periodic event or a round may hold for tens
of milliseconds; waiting for it on the event loop would stall every other call, renewals
included. So the wrapper never waits for the lock on the loop: when the lock is free it
takes it and runs the handler right there (no thread hand-off, the common case), and when
it is taken the handler goes to the loop's default executor, which `server.LoopThread`
makes a single thread, and waits there. `@rpc(on_loop=True)` runs a handler on the loop
without the lock: `RenewLease`, a thousand calls a second and lock-free in the common case
(a coroutine there, which sends the rare renewal that needs the lock to the executor).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import sqlite3
from typing import Any, AsyncIterator, Callable, TypeVar

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


def failure(self: Servicer, name: str, exc: Exception) -> tuple[grpc.StatusCode, str]:
    """The status code and one-line message a failed call is answered with (logged if unexpected)."""
    if isinstance(exc, errors.DaemonError):
        return CODES.get(type(exc), grpc.StatusCode.UNKNOWN), str(exc)
    if isinstance(exc, sqlite3.Error):
        event(self.ctx.log, "rpc.store_error", logging.ERROR, exc_info=True, method=name)
        return grpc.StatusCode.UNAVAILABLE, f"state store unavailable ({exc}); retry"
    event(self.ctx.log, "rpc.internal_error", logging.ERROR, exc_info=True, method=name)
    return grpc.StatusCode.INTERNAL, "internal error; see the synergyd log"


def rpc(method: F | None = None, /, *, on_loop: bool = False) -> Any:
    """`@rpc` or `@rpc(on_loop=True)` (see the module doc for where handlers run)."""
    if method is None:
        return functools.partial(_wrap, on_loop=on_loop)
    return _wrap(method, on_loop=on_loop)


def _wrap(method: F, on_loop: bool) -> F:
    @functools.wraps(method)
    async def wrapper(self: Servicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            if on_loop:  # a plain method, or a coroutine (which hands its waits off itself)
                result = method(self, request, context)
                return await result if inspect.isawaitable(result) else result
            lock = self.ctx.lock
            if lock.acquire(blocking=False):
                try:
                    return method(self, request, context)
                finally:
                    lock.release()
            return await asyncio.get_running_loop().run_in_executor(None, method, self, request, context)
        except Exception as exc:  # noqa: BLE001 (a bad request must never take the daemon down)
            code, message = failure(self, method.__name__, exc)
        self.ctx.metrics.rpc_errors.labels(method.__name__, code.name).inc()
        await context.abort(code, message)

    return wrapper  # type: ignore[return-value]


def stream_rpc(method: F) -> F:
    """`@rpc` for server-streaming methods, written as async generators."""

    @functools.wraps(method)
    async def wrapper(self: Servicer, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            async for item in method(self, request, context):
                yield item
            return
        except Exception as exc:  # noqa: BLE001 (as in rpc)
            code, message = failure(self, method.__name__, exc)
        self.ctx.metrics.rpc_errors.labels(method.__name__, code.name).inc()
        await context.abort(code, message)

    return wrapper  # type: ignore[return-value]
