"""Undecodable request bytes answered INVALID_ARGUMENT, as a guard on each method handler.

grpc.aio answers a request that does not parse as its message type with UNKNOWN; a client
sent bad input, so it gets INVALID_ARGUMENT naming the expected message instead. Applied
once per method when the server registers it (server.Guard), not per call.
"""

from __future__ import annotations

from typing import Any, AsyncIterator

import grpc


def strict_decoding(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """`handler`, decoding its requests itself (unary-unary and stream-stream methods; others
    unchanged). On a stream, an undecodable message ends the stream with INVALID_ARGUMENT."""
    decode = handler.request_deserializer
    if decode is None:
        return handler
    expected = getattr(getattr(decode, "__self__", None), "DESCRIPTOR", None)
    name = expected.full_name if expected is not None else "request"
    if handler.stream_stream is not None:
        return _decoded_stream(handler, name)
    if handler.unary_unary is None:
        return handler
    inner = handler.unary_unary

    async def decoded(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            request = decode(raw)
        except Exception:  # noqa: BLE001 (any parse failure is the client's)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request: not a valid {name} message")
        return await inner(request, context)

    return grpc.unary_unary_rpc_method_handler(decoded, response_serializer=handler.response_serializer)


def _decoded_stream(handler: grpc.RpcMethodHandler, name: str) -> grpc.RpcMethodHandler:
    decode, inner = handler.request_deserializer, handler.stream_stream

    async def decoded(raws: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async def requests() -> AsyncIterator[Any]:
            async for raw in raws:
                try:
                    request = decode(raw)
                except Exception:  # noqa: BLE001 (as above)
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request: not a valid {name} message")
                yield request

        async for item in inner(requests(), context):
            yield item

    return grpc.stream_stream_rpc_method_handler(decoded, response_serializer=handler.response_serializer)
