"""The agent's side of NodeService (the messages it sends are built in report.py).

Agents only dial out (docs/daemon.md, "Why instructions ride on heartbeat replies"): every
heartbeat carries the full task list, and the reply says what to change. The channel and
the reconnect back-off are shared with the job side (`synergy.common.channel`).
"""

from __future__ import annotations

from synergy.common.channel import RPC_TIMEOUT_S, open_channel
from synergy.v1 import node_pb2, node_pb2_grpc


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
