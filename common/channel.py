"""A gRPC channel to synergyd and the back-off between reconnects: what the agent and a
training job's lease keeper share; and `MessageStream`, one long-lived call carrying many
request/response pairs (a job's lease renewals: a message on an open stream costs the daemon
about a third of a unary call's gRPC CPU).

Loads only grpc: a training process uses it and must not load the agent's supervisor,
telemetry or psutil (tests/regressions/test_import_boundaries.py).
"""

from __future__ import annotations

import queue
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import grpc

RPC_TIMEOUT_S = 5.0
#: Reconnect quickly after a daemon restart (gRPC's default back-off grows to two minutes).
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


@dataclass
class Backoff:
    """Jittered exponential back-off while the daemon is unreachable (agents never stampede)."""

    initial_s: float = 0.2
    max_s: float = 5.0
    attempt: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next(self) -> float:
        delay = min(self.max_s, self.initial_s * 2**self.attempt)
        self.attempt += 1
        return delay * self.rng.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.attempt = 0


def open_channel(address: str, tls_ca: str = "", tls_cert: str = "", tls_key: str = "") -> grpc.Channel:
    """A channel to synergyd: TLS when a CA or a client certificate is given, plaintext otherwise."""
    if tls_ca or tls_cert:
        creds = grpc.ssl_channel_credentials(
            root_certificates=Path(tls_ca).read_bytes() if tls_ca else None,
            private_key=Path(tls_key).read_bytes() if tls_key else None,
            certificate_chain=Path(tls_cert).read_bytes() if tls_cert else None,
        )
        return grpc.secure_channel(address, creds, options=CHANNEL_OPTIONS)
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


class StreamRefused(grpc.RpcError):
    """One message on a stream answered with an error status (the stream goes on): raised
    like the unary call's RpcError, so callers handle both the same way."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self._code, self._message = code, message

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message


class StreamBroken(Exception):
    """The stream itself ended (daemon restart, network) or an answer did not come in time:
    the caller sends that message by the unary method and opens a new stream later."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


_CODES = {c.value[0]: c for c in grpc.StatusCode}
_END = object()


def stream_answer(response: Any) -> Any:
    """The reply inside a per-message stream response (`reply`, `code`, `message`, e.g.
    RenewLeaseStreamResponse), or StreamRefused with its status when `code` is not OK."""
    if response.code:
        raise StreamRefused(_CODES.get(response.code, grpc.StatusCode.UNKNOWN), response.message)
    return response.reply


class MessageStream:
    """One long-lived bidirectional call carrying many requests and their responses, in order.

    A reader thread takes the responses off the call, so that a caller can wait for one with
    a deadline (a blocking read of a synchronous stream has none): `exchange` when every
    request is answered, `send` and `answer` when some are not (a renewal stream with
    `answer_every`). Not thread-safe: one caller at a time, and `close` from any thread.
    Close it before the process forks (gRPC's fork support cannot close a channel with a
    call in flight).
    """

    def __init__(self, open_call: Callable[..., Any], metadata: Sequence[tuple[str, str]]) -> None:
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        #: Set by `close`: a StreamBroken after it is this side's doing, not the daemon's.
        self.closed = False
        self._call = open_call(iter(self._requests.get, _END), metadata=metadata)
        self._reader = threading.Thread(target=self._read, daemon=True, name="synergy-stream")
        self._reader.start()

    def _read(self) -> None:
        try:
            for response in self._call:
                self._answers.put(response)
            self._answers.put(StreamBroken("the daemon ended the stream"))
        except grpc.RpcError as exc:
            self._answers.put(StreamBroken(f"{exc.code().name}: {exc.details()}", exc.code()))

    def exchange(self, request: Any, timeout_s: float = RPC_TIMEOUT_S) -> Any:
        """Send `request`, return its response; StreamBroken (the stream then closed) when the
        stream ended or no response came within `timeout_s`."""
        self.send(request)
        answer = self.answer(timeout_s)
        if answer is None:
            why = "closed on this side" if self.closed else f"no answer within {timeout_s:g} s"
            self.close()
            raise StreamBroken(why, grpc.StatusCode.DEADLINE_EXCEEDED)
        return answer

    def send(self, request: Any) -> None:
        self._requests.put(request)

    def answer(self, timeout_s: float) -> Any:
        """The next response; None when none came within `timeout_s` or the stream was
        closed on this side; StreamBroken (the stream then closed) when it ended otherwise."""
        try:
            answer = self._answers.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return None
        if isinstance(answer, StreamBroken):
            if self.closed:
                return None
            self.close()
            raise answer
        return answer

    def close(self) -> None:
        """End the call (idempotent) and wait for the reader thread."""
        self.closed = True
        self._requests.put(_END)
        self._call.cancel()
        if self._reader is not threading.current_thread():
            self._reader.join(timeout=RPC_TIMEOUT_S)
