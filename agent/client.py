"""The agent's side of NodeService: the channel and reconnect back-off (the messages it sends
are built in report.py).

Agents only dial out (docs/daemon.md, "Why instructions ride on heartbeat replies"): every
heartbeat carries the full task list, and the reply says what to change. This module loads
only grpc and the stubs: the job-side iterator uses its channel and back-off, and must not
load the agent's supervisor, telemetry or psutil into every training process.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from synergy.v1 import node_pb2, node_pb2_grpc

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
    if tls_ca or tls_cert:
        creds = grpc.ssl_channel_credentials(
            root_certificates=Path(tls_ca).read_bytes() if tls_ca else None,
            private_key=Path(tls_key).read_bytes() if tls_key else None,
            certificate_chain=Path(tls_cert).read_bytes() if tls_cert else None,
        )
        return grpc.secure_channel(address, creds, options=CHANNEL_OPTIONS)
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


class NodeClient:
    """NodeService with the cluster token; raises grpc.RpcError for the caller to classify."""

    def __init__(self, address: str, token: str, tls_ca: str = "", tls_cert: str = "", tls_key: str = "") -> None:
        self.address = address
        self.channel = open_channel(address, tls_ca, tls_cert, tls_key)
        self.stub = node_pb2_grpc.NodeServiceStub(self.channel)
        self.metadata = (("authorization", f"Bearer {token}"),)

    def register(self, request: node_pb2.RegisterNodeRequest) -> node_pb2.RegisterNodeResponse:
        return self.stub.RegisterNode(request, metadata=self.metadata, timeout=RPC_TIMEOUT_S)

    def heartbeat(self, request: node_pb2.HeartbeatRequest) -> node_pb2.HeartbeatResponse:
        return self.stub.Heartbeat(request, metadata=self.metadata, timeout=RPC_TIMEOUT_S)

    def close(self) -> None:
        self.channel.close()
