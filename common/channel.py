"""A gRPC channel to synergyd and the back-off between reconnects: what the agent and a
training job's lease keeper share.

Loads only grpc: a training process uses it and must not load the agent's supervisor,
telemetry or psutil (tests/regressions/test_import_boundaries.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

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
