"""Undecodable request bytes answered INVALID_ARGUMENT, as a guard on each method handler.

grpc.aio answers a request that does not parse as its message type with UNKNOWN; a client
sent bad input, so it gets INVALID_ARGUMENT naming the expected message instead. Applied
once per method when the server registers it (server.Guard), not per call.
"""

from __future__ import annotations

from typing import Any

import grpc


def strict_decoding(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """`handler`, decoding its request itself (unary-unary methods; others unchanged)."""
    if handler.unary_unary is None or handler.request_deserializer is None:
        return handler
    decode, inner = handler.request_deserializer, handler.unary_unary
    expected = getattr(getattr(decode, "__self__", None), "DESCRIPTOR", None)
    name = expected.full_name if expected is not None else "request"

    async def decoded(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            request = decode(raw)
        except Exception:  # noqa: BLE001 (any parse failure is the client's)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request: not a valid {name} message")
        return await inner(request, context)

    return grpc.unary_unary_rpc_method_handler(decoded, response_serializer=handler.response_serializer)
