"""Finding synergyd and proving who you are to it, and calling it.

Resolution order, first hit wins (docs/cli.md):
  socket:  --socket or $SYNERGY_SOCKET; else, with no --address/$SYNERGY_ADDRESS, no
           --token-file/$SYNERGY_TOKEN and no readable STATE_DIR/admin.token (synergyd's own
           user and root go on acting as the built-in admin, as before users existed),
           STATE_DIR/synergyd.sock when it exists. No token: synergyd learns the Unix user from
           the kernel (docs/daemon.md, "Users and security");
  address: --address, $SYNERGY_ADDRESS, the `address` file in the state dir;
  token:   --token-file, $SYNERGY_TOKEN (the token itself), the admin token file in the
           state dir (readable by synergyd's own user only);
  state dir: --state-dir, $SYNERGY_STATE_DIR, synergyd's default (~/.local/state/synergy).
so a user on the daemon's machine needs no flags at all once SYNERGY_STATE_DIR is set,
and a script elsewhere passes the address and its user token explicitly (or a client
certificate, --tls-cert/--tls-key, on the mutual-TLS port).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import grpc

from synergy.common.tlsprobe import tls_problem as probe_tls
from synergy.scheduler.cli.errors import CliError, ExitCode, from_rpc_error, transport_failure
from synergy.scheduler.statedir import ADDRESS_FILE, ADMIN_TOKEN_FILE, SOCKET_FILE, default_state_dir
from synergy.v1 import admin_pb2_grpc

DEFAULT_TIMEOUT_S = 10.0
#: The TLS probe after a failed call: a local handshake, or nothing to learn.
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Target:
    """Where to call and with which credentials; `origin` says where the address came from."""

    address: str
    origin: str
    token: str = field(default="", repr=False)
    tls_ca: str = ""
    #: PEM client certificate and key (mutual TLS: the certificate's CN is the user).
    tls_cert: str = ""
    tls_key: str = ""


def local_socket(socket_path: str | None, state: str, env: Mapping[str, str]) -> str:
    """The Unix socket to use ("" = none): --socket, $SYNERGY_SOCKET, else the state dir's when it exists."""
    if socket_path or env.get("SYNERGY_SOCKET"):
        return str(Path(socket_path or env["SYNERGY_SOCKET"]).expanduser())
    default = Path(state) / SOCKET_FILE
    try:
        return str(default) if default.is_socket() else ""
    except OSError:  # a state dir we may not enter: no socket for us there
        return ""


def _readable(path: Path) -> bool:
    """The daemon's own user (or root) can read its admin.token: they act as the built-in admin."""
    return os.access(path, os.R_OK)


def resolve_target(address: str | None, state_dir: str | None, token_file: str | None,
                   tls_ca: str | None = None, environ: Mapping[str, str] | None = None,
                   socket_path: str | None = None, tls_cert: str | None = None,
                   tls_key: str | None = None) -> Target:
    env = os.environ if environ is None else environ
    state = state_dir or env.get("SYNERGY_STATE_DIR") or str(default_state_dir())
    cert, key = tls_cert or env.get("SYNERGY_TLS_CERT", ""), tls_key or env.get("SYNERGY_TLS_KEY", "")
    if bool(cert) != bool(key):
        raise CliError("--tls-cert and --tls-key go together (a client certificate and its key)", ExitCode.USAGE)
    if cert and not (tls_ca or env.get("SYNERGY_TLS_CA")):
        raise CliError("--tls-cert needs --tls-ca (the CA of synergyd's own certificate)", ExitCode.USAGE)
    explicit = address or env.get("SYNERGY_ADDRESS") or token_file or env.get("SYNERGY_TOKEN") or cert
    sock = ""
    if socket_path or env.get("SYNERGY_SOCKET") or not (explicit or _readable(Path(state) / ADMIN_TOKEN_FILE)):
        sock = local_socket(socket_path, state, env)
    if sock:
        return Target(address=f"unix:{sock}", origin="--socket" if socket_path else sock)
    origin = "--address" if address else ""
    if not address and env.get("SYNERGY_ADDRESS"):
        address, origin = env["SYNERGY_ADDRESS"], "SYNERGY_ADDRESS"
    if not address:
        address_path = Path(state) / ADDRESS_FILE
        address = _read_secretless(
            address_path, what="synergyd address",
            hint=f"is synergyd running with --state-dir {state}? else pass --address or set SYNERGY_ADDRESS")
        origin = str(address_path)
    token = "" if cert and not (token_file or env.get("SYNERGY_TOKEN")) else _resolve_token(token_file, state, env)
    return Target(address=address.strip(), origin=origin, token=token,
                  tls_ca=tls_ca or env.get("SYNERGY_TLS_CA", ""), tls_cert=cert, tls_key=key)


def _resolve_token(token_file: str | None, state: str, env: Mapping[str, str]) -> str:
    if token_file:
        return _read_secretless(Path(token_file), what="token", hint="check --token-file")
    if env.get("SYNERGY_TOKEN"):
        return env["SYNERGY_TOKEN"].strip()
    path = Path(state) / ADMIN_TOKEN_FILE
    if path.exists():
        return _read_secretless(path, what="admin token", hint="it is readable by its owner only")
    # No token: the daemon answers UNAUTHENTICATED, which errors.py words with the fix.
    return ""


def _read_secretless(path: Path, *, what: str, hint: str) -> str:
    """Read a small file; the error names the path, never the content (it may be a token)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise CliError(f"cannot read the {what}: {path} does not exist ({hint})", ExitCode.UNREACHABLE) from None
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or "not a text file"
        raise CliError(f"cannot read the {what} from {path}: {why} ({hint})", ExitCode.UNREACHABLE) from None
    if not text:
        raise CliError(f"the {what} file {path} is empty ({hint})", ExitCode.UNREACHABLE)
    return text


class Client:
    """The admin stub with the token attached and gRPC failures turned into CliError."""

    def __init__(self, target: Target, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.target = target
        self.timeout_s = timeout_s
        if target.tls_ca:
            root = _read_pem(target.tls_ca, "TLS CA")
            pair = (_read_pem(target.tls_key, "client key"), _read_pem(target.tls_cert, "client certificate")) \
                if target.tls_cert else (None, None)
            self._channel = grpc.secure_channel(target.address, grpc.ssl_channel_credentials(root, *pair))
        else:
            self._channel = grpc.insecure_channel(target.address)
        self._stub = admin_pb2_grpc.AdminServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {target.token}"),) if target.token else ()

    def call(self, method: str, request: Any, deadline: bool = True) -> Any:
        """`deadline=False` for a stream that lasts as long as the user wants (`logs -f`)."""
        try:
            timeout = self.timeout_s if deadline else None
            return getattr(self._stub, method)(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            error = from_rpc_error(err, self.target.address, self.timeout_s)
            if transport_failure(err):
                # gRPC words a TLS mismatch like a daemon that is down; a handshake of our own says which.
                error = tls_problem(self.target, min(self.timeout_s, PROBE_TIMEOUT_S)) or error
            raise error from None

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_pem(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read the {what} file {path}: {exc.strerror}", ExitCode.USAGE) from None


# -- telling TLS trouble from a daemon that is down --------------------------------------------
def tls_problem(target: Target, timeout_s: float) -> CliError | None:
    """Why a connection failed, when TLS is the reason (the probe every process shares,
    `synergy.common.tlsprobe`), as the CLI's error: a CA file that is no certificate is a
    usage error, the rest say the daemon is unreachable."""
    problem = probe_tls(target.address, target.tls_ca, timeout_s)
    if problem is None:
        return None
    return CliError(problem.message, ExitCode.USAGE if problem.bad_input else ExitCode.UNREACHABLE)
