"""Defect 8: TLS trouble was reported as "cannot reach synergyd (is it running?)", plus
gRPC's own `I... ssl_transport_security.cc ... CERTIFICATE_VERIFY_FAILED` log line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.test_daemon_tls import make_pki

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def synergy(daemon, *args: str) -> subprocess.CompletedProcess[str]:
    """The real entry point in a fresh interpreter: gRPC's logging is decided at its import."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SYNERGY_", "GRPC_"))}
    env.update(SYNERGY_ADDRESS=daemon.address, SYNERGY_TOKEN=daemon.admin_token)
    code = "import sys; from synergy.scheduler.cli.main import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def tls_daemon(start_daemon, tmp_path: Path):
    pki, other = tmp_path / "pki", tmp_path / "other"
    for d in (pki, other):
        d.mkdir()
        make_pki(d)
    daemon = start_daemon("--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"))
    return daemon, pki / "ca.pem", other / "ca.pem"


def test_plaintext_client_is_told_to_pass_the_ca(tls_daemon) -> None:
    daemon, _, _ = tls_daemon
    run = synergy(daemon, "status")
    assert run.returncode == 3 and run.stdout == ""
    assert run.stderr.splitlines() == [
        f"synergy: error: synergyd at {daemon.address} speaks TLS: pass --tls-ca FILE (or set SYNERGY_TLS_CA) "
        "with the CA that signed its certificate"
    ]


def test_wrong_ca_is_named_and_grpc_logs_stay_quiet(tls_daemon) -> None:
    daemon, good_ca, wrong_ca = tls_daemon
    run = synergy(daemon, "status", "--tls-ca", str(wrong_ca))
    assert run.returncode == 3 and run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr  # no `I1123 ... ssl_transport_security.cc` line from gRPC
    assert lines[0].startswith(f"synergy: error: synergyd at {daemon.address}: its certificate is not trusted "
                               f"by CA {wrong_ca} (")
    ok = synergy(daemon, "status", "--json", "--tls-ca", str(good_ca))
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr


def test_tls_client_against_a_plaintext_daemon(start_daemon, tmp_path: Path) -> None:
    make_pki(tmp_path)
    daemon = start_daemon()
    run = synergy(daemon, "status", "--tls-ca", str(tmp_path / "ca.pem"))
    assert run.returncode == 3
    assert run.stderr.splitlines() == [
        f"synergy: error: synergyd at {daemon.address} did not complete a TLS handshake; is it running "
        "without TLS? (then drop --tls-ca / SYNERGY_TLS_CA)"
    ]
