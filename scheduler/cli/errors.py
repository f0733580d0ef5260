"""What the CLI tells the user when something goes wrong, and with which exit code.

Every failure, local or remote, ends as one line on stderr and a documented exit code
(docs/cli.md); a traceback is a bug. gRPC status codes are translated here, in one place,
so every command words the same failure the same way.
"""
from __future__ import annotations

import enum

import grpc


class ExitCode(enum.IntEnum):
    OK = 0
    #: The daemon answered and refused (not found, permission denied, conflict...).
    FAILED = 1
    #: The user's input is wrong: flags, the job spec, or INVALID_ARGUMENT from the daemon.
    USAGE = 2
    #: The daemon could not be reached or did not answer in time.
    UNREACHABLE = 3


class CliError(Exception):
    """A failure to report as one line and exit with `code`."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.message = one_line(message)
        self.code = code


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def from_rpc_error(err: grpc.RpcError, address: str, timeout_s: float) -> CliError:
    """Translate a failed call into the sentence the user sees."""
    code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = one_line((err.details() if isinstance(err, grpc.Call) else "") or "")
    if code == grpc.StatusCode.UNAVAILABLE and not _from_transport(details):
        # The daemon itself answered UNAVAILABLE (e.g. its state store is busy): say so.
        return CliError(f"synergyd at {address} is unavailable: {details}", ExitCode.UNREACHABLE)
    if code == grpc.StatusCode.UNAVAILABLE:
        return CliError(f"cannot reach synergyd at {address} (is it running? see --address, "
                        "SYNERGY_ADDRESS or --state-dir)", ExitCode.UNREACHABLE)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CliError(f"synergyd at {address} did not answer within {timeout_s:g} s "
                        "(raise --timeout?)", ExitCode.UNREACHABLE)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return CliError(details or "synergyd rejected the request as invalid", ExitCode.USAGE)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return CliError(f"synergyd does not know who you are ({details or 'no detail'}); on its machine use "
                        "its Unix socket (--socket, --state-dir), elsewhere a user token an admin issued "
                        "(--token-file, SYNERGY_TOKEN)")
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return CliError(f"permission denied: {details or 'you may not do that'}")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return CliError(f"synergyd at {address} does not support this command "
                        f"({details or 'unimplemented'}); is it an older version?")
    if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
                grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED):
        return CliError(details or code.name.lower().replace("_", " "))
    return CliError(f"synergyd failed ({code.name}): {details or 'no detail'}")


def transport_failure(err: grpc.RpcError) -> bool:
    """The call failed in gRPC's client (no connection, a failed handshake), not in synergyd."""
    if not isinstance(err, grpc.Call) or err.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    return _from_transport(one_line(err.details() or ""))


#: Words of gRPC's own (client-side) UNAVAILABLE details: no connection, or a lost one.
_TRANSPORT_WORDS = ("connect", "socket", "dns", "resolv", "lookup", "unreachable", "closed", "reset",
                    "goaway", "handshake", "ssl", "tls", "end of tcp", "broken pipe", "io error")


def _from_transport(details: str) -> bool:
    text = details.lower()
    return not text or any(word in text for word in _TRANSPORT_WORDS)
