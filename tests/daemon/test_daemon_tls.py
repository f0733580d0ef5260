"""Optional TLS: a server certificate for everyone, client certificates for agents."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest

from pki import make_pki
from synergyd_harness import md
from synergy.v1 import admin_pb2, admin_pb2_grpc, common_pb2, node_pb2, node_pb2_grpc

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def test_tls_and_mutual_tls_for_agents(start_daemon, tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    make_pki(pki)
    d = start_daemon(
        "--tls-cert",
        str(pki / "server.pem"),
        "--tls-key",
        str(pki / "server.key"),
        "--tls-client-ca",
        str(pki / "ca.pem"),
    )
    ca = (pki / "ca.pem").read_bytes()
    server_only = grpc.secure_channel(d.address, grpc.ssl_channel_credentials(root_certificates=ca))
    status = admin_pb2_grpc.AdminServiceStub(server_only).GetClusterStatus(
        admin_pb2.GetClusterStatusRequest(), metadata=md(d.admin_token), timeout=5
    )
    assert status.round_s == 0.5
    register = node_pb2.RegisterNodeRequest(node_id="tls-node", capacity=common_pb2.Resources(gpus=1))
    with pytest.raises(grpc.RpcError) as err:  # the cluster token alone is not enough
        node_pb2_grpc.NodeServiceStub(server_only).RegisterNode(register, metadata=md(d.cluster_token), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    agent_address = (d.state_dir / "agent_address").read_text().strip()
    mutual = grpc.secure_channel(
        agent_address,
        grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=(pki / "agent.key").read_bytes(),
            certificate_chain=(pki / "agent.pem").read_bytes(),
        ),
    )
    reply = node_pb2_grpc.NodeServiceStub(mutual).RegisterNode(register, metadata=md(d.cluster_token), timeout=5)
    assert reply.state == common_pb2.NODE_STATE_READY
    plaintext = grpc.insecure_channel(d.address)
    with pytest.raises(grpc.RpcError) as refused:  # the handshake fails: no answer, not a slow one
        admin_pb2_grpc.AdminServiceStub(plaintext).GetClusterStatus(
            admin_pb2.GetClusterStatusRequest(), metadata=md(d.admin_token), timeout=30
        )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    for ch in (server_only, mutual, plaintext):
        ch.close()
