"""Optional TLS: a server certificate for everyone, client certificates for agents."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from synergyd_harness import md
from synergy.v1 import admin_pb2, admin_pb2_grpc, common_pb2, node_pb2, node_pb2_grpc

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and an agent certificate, all signed by the CA."""
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=synergy-test-ca",
        cwd=d,
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "agent"):
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
            cwd=d,
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            cwd=d,
        )


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
