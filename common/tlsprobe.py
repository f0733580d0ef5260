"""Telling TLS trouble from a daemon that is down, in one sentence every process says the same way.

gRPC reports a TLS mismatch as a bare UNAVAILABLE. The CLI (`synergy ...`) and synergy-agent
both probe with a handshake of their own (`ssl`) to name the reason; this is that probe.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass


@dataclass(frozen=True)
class TlsProblem:
    """What is wrong, and whether it is the caller's input (a CA file that is no certificate)."""

    message: str
    bad_input: bool = False


def tls_problem(address: str, tls_ca: str, timeout_s: float) -> TlsProblem | None:
    """Why a connection to `address` failed, when TLS is the reason.

    Plaintext client, TLS daemon: an unverified handshake succeeds, so the daemon speaks TLS.
    With `tls_ca`: a verified handshake says whether the CA does not trust the certificate,
    the certificate names another host, or the daemon does not speak TLS at all. None when
    the probe learns nothing (not listening, not TLS, or a handshake that works).
    """
    host_port = split_address(address)
    if host_port is None:
        return None
    host, port = host_port
    where = f"synergyd at {address}"
    if not tls_ca:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if _handshake(ctx, host, port, timeout_s) is None:
            return TlsProblem(f"{where} speaks TLS: pass --tls-ca FILE (or set SYNERGY_TLS_CA) with the CA "
                              "that signed its certificate")
        return None
    try:
        ctx = ssl.create_default_context(cafile=tls_ca)
    except (OSError, ssl.SSLError) as exc:
        return TlsProblem(f"the TLS CA file {tls_ca} is not a PEM certificate ({exc})", bad_input=True)
    failure = _handshake(ctx, host, port, timeout_s)
    if isinstance(failure, ssl.SSLCertVerificationError):
        if failure.verify_code == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
            return TlsProblem(f"{where}: its certificate is not valid for {host} ({failure.verify_message})")
        return TlsProblem(f"{where}: its certificate is not trusted by CA {tls_ca} ({failure.verify_message})")
    if isinstance(failure, (ssl.SSLError, ConnectionResetError, ssl.SSLEOFError)):
        return TlsProblem(f"{where} did not complete a TLS handshake; is it running without TLS? "
                          "(then drop --tls-ca / SYNERGY_TLS_CA)")
    return None


def _handshake(ctx: ssl.SSLContext, host: str, port: int, timeout_s: float) -> Exception | None:
    """None when a TLS handshake succeeds; the failure otherwise (OSError: no connection)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            with ctx.wrap_socket(sock, server_hostname=host):
                return None
    except (OSError, ssl.SSLError) as exc:  # SSLError is an OSError; both named for the reader
        return exc


def split_address(address: str) -> tuple[str, int] | None:
    """HOST:PORT or [V6]:PORT as gRPC takes it (a `dns:` or `ipv4:` scheme is dropped)."""
    text = address
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        text = text.removeprefix(scheme)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit():
        return None
    host = host.strip("[]") or "localhost"
    return host, int(port)
